//! Generates the prost messages and the tonic client of `modelir.v1` from a descriptor set written by
//! `buf build --as-file-descriptor-set` (so no `protoc` is needed): `modelir-codegen <set.binpb> <out dir>`.
use prost::Message;
use prost_types::FileDescriptorSet;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let [_, descriptors, out] = args.as_slice() else {
        return Err("usage: modelir-codegen <descriptor set> <out dir>".into());
    };
    let set = FileDescriptorSet::decode(std::fs::read(descriptors)?.as_slice())?;
    tonic_prost_build::configure().build_server(false).out_dir(out).compile_fds(set)?;
    Ok(())
}
