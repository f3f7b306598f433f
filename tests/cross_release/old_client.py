"""A client of IR 1.0.0, run in its own interpreter with only the 1.0.0 stubs importable as `modelir` (generated
from `proto/baseline/modelir-v1.0.0.binpb` by `tests/test_cross_release.py`): it replays the service cases that IR
1.0 has RPCs for against an address and prints, one JSON line per case, what happened in the shape of `expect`.

    PYTHONPATH=<stubs> python old_client.py <cases dir> '{"open": "<address>", "auth": ..., "limited": ...}'

It follows the case format's runner keys as every runner does (conformance/README.md): `token`, `deadlineMs`,
`repeat` and `cancelAfterEvents`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import grpc
from google.protobuf import json_format
from google.rpc import error_details_pb2
from grpc_status import rpc_status
from modelir.v1 import errors_pb2, service_pb2, service_pb2_grpc, version_pb2

assert version_pb2.DESCRIPTOR.GetOptions().Extensions[version_pb2.ir_version] == "1.0.0"
METHODS = service_pb2.DESCRIPTOR.services_by_name["ModelService"].methods_by_name
DETAILS = {
    "errorInfo": error_details_pb2.ErrorInfo,
    "badRequest": error_details_pb2.BadRequest,
    "unsupportedCapabilities": errors_pb2.UnsupportedCapabilities,
    "retryInfo": error_details_pb2.RetryInfo,
}


def _error(error: grpc.RpcError) -> dict:
    out: dict = {"code": error.code().name}
    status = rpc_status.from_call(error)
    for holder in status.details if status is not None else ():
        for key, cls in DETAILS.items():
            if holder.Is(cls.DESCRIPTOR):
                detail = cls()
                holder.Unpack(detail)
                out[key] = json_format.MessageToDict(detail)
    if "errorInfo" in out:
        out["reason"] = out["errorInfo"].get("reason", "")
    return out


def main(cases: Path, addresses: dict[str, str]) -> None:
    channels = {name: grpc.insecure_channel(address) for name, address in addresses.items()}
    for path in sorted(cases.glob("*.json")):
        case = json.loads(path.read_text())
        if case["rpc"] not in METHODS:
            continue  # an RPC added after 1.0: this client cannot call it
        method = METHODS[case["rpc"]]
        request_class = getattr(service_pb2, method.input_type.name)
        request = json_format.ParseDict(case["request"], request_class())
        call = getattr(service_pb2_grpc.ModelServiceStub(channels[case["server"]]), case["rpc"])
        metadata = [("authorization", f"Bearer {case['token']}")] if "token" in case else None
        timeout = case.get("deadlineMs", 30_000) / 1000
        for _ in range(case.get("repeat", 1)):
            events: list = []
            try:
                if method.server_streaming:
                    stream = call(request, metadata=metadata, timeout=timeout)
                    for event in stream:
                        events.append(event)
                        if len(events) == case.get("cancelAfterEvents"):
                            stream.cancel()
                    actual = {"stream": [json_format.MessageToDict(e) for e in events]}
                else:
                    actual = {"response": json_format.MessageToDict(call(request, metadata=metadata, timeout=timeout))}
            except grpc.RpcError as error:
                actual = {"stream": [json_format.MessageToDict(e) for e in events]} if events else {}
                actual["error"] = _error(error)
        print(json.dumps({"case": path.stem, "actual": actual}))


if __name__ == "__main__":
    main(Path(sys.argv[1]), json.loads(sys.argv[2]))
