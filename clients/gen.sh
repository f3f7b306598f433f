#!/usr/bin/env bash
# Generates the TypeScript, Go and Rust code of modelir.v1 into OUT (default: clients/ itself), from proto/ with the
# repository's pinned buf. `make gen-clients` writes the committed code; `make gen-clients-check` generates into a
# temporary directory and diffs. Needs: BUF (the pinned binary), the TypeScript devDependencies installed,
# protoc-gen-go and protoc-gen-go-grpc on PATH, and CARGO_TARGET_DIR for the Rust generator's build.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
proto="$here/../proto"
out="$(mkdir -p "${1:-$here}" && cd "${1:-$here}" && pwd)"
: "${BUF:?set BUF to the pinned buf binary}"

# TypeScript: protoc-gen-es, over modelir.v1 and over google/rpc's error details (from google-proto-files).
mkdir -p "$out/typescript/src"
rm -rf "$out/typescript/src/gen"
(cd "$here/typescript" &&
  "$BUF" generate "$proto" --template buf.gen.yaml -o "$out/typescript" &&
  "$BUF" generate node_modules/google-proto-files --template buf.gen.yaml -o "$out/typescript" \
    --path node_modules/google-proto-files/google/rpc/error_details.proto)

# Go: protoc-gen-go and protoc-gen-go-grpc; go_package puts the files under modelir/v1.
mkdir -p "$out/go/modelir"
rm -rf "$out/go/modelir/v1"
(cd "$here/go" && "$BUF" generate "$proto" --template buf.gen.yaml -o "$out/go")

# Rust: buf writes the descriptor set (embedded by the crate for prost-reflect), the codegen crate runs
# tonic-prost-build over it.
gen="$out/rust/modelir/src/gen"
mkdir -p "$gen"
rm -f "$gen"/*.rs "$gen"/*.binpb
"$BUF" build "$proto" --as-file-descriptor-set -o "$gen/modelir.fds.binpb"
(cd "$here/rust" && cargo run --quiet --locked -p modelir-codegen -- "$gen/modelir.fds.binpb" "$gen")
