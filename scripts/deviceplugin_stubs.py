"""Generate the device plugin's gRPC stubs from the kubelet's api.proto (v1beta1).

    python scripts/deviceplugin_stubs.py [--proto build/kubelet-proto/api.proto]

Run it with the interpreter that will run the plugin (the venv's, the image's): the stubs
that grpcio-tools writes require a grpcio and a protobuf runtime at least as new as the
tools that wrote them, so the stubs, the tools and the runtime come from one environment.
The proto comes from scripts/kubelet-proto.sh (Debian's golang-github-kubernetes-kubelet-dev).

Its gogoproto options (Go code generation only: custom Go names, marshalers) and the import
of gogo.proto are taken out before protoc runs; they change neither the wire format nor the
services' names (`v1beta1.Registration`, `v1beta1.DevicePlugin`), which is all the kubelet
sees. Output: ocihook/deviceplugin/v1beta1/api_pb2.py and api_pb2_grpc.py (not committed).
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGE_DIR = "ocihook/deviceplugin/v1beta1"
OUTPUTS = ("api_pb2.py", "api_pb2_grpc.py")
GOGO_IMPORT = re.compile(r'^import "github\.com/gogo/protobuf/gogoproto/gogo\.proto";\n', re.M)
GOGO_FILE_OPTION = re.compile(r"^option \(gogoproto\.\w+\) *= *\w+;\n", re.M)
GOGO_FIELD_OPTION = re.compile(r' \[\(gogoproto\.\w+\) = "\w+"\]')
SERVICES = ("service Registration {", "service DevicePlugin {")


def strip_gogo(text: str) -> str:
    """The proto without its Go-only gogoproto import and options."""
    text = GOGO_FIELD_OPTION.sub("", GOGO_FILE_OPTION.sub("", GOGO_IMPORT.sub("", text)))
    if "gogoproto" in text:
        line = next(line for line in text.splitlines() if "gogoproto" in line)
        raise SystemExit(f"deviceplugin_stubs: a gogoproto use this script does not know: {line}")
    if "package v1beta1;" not in text or not all(s in text for s in SERVICES):
        raise SystemExit("deviceplugin_stubs: not the kubelet's device plugin API v1beta1")
    return text


def generate(proto: Path, out: Path) -> None:
    try:
        import grpc_tools  # noqa: F401
    except ImportError:
        raise SystemExit(
            f"deviceplugin_stubs: {sys.executable} has no grpcio-tools "
            "(pip install grpcio-tools grpcio protobuf)"
        ) from None
    with tempfile.TemporaryDirectory() as work:
        source = Path(work) / "in" / PACKAGE_DIR / "api.proto"
        source.parent.mkdir(parents=True)
        source.write_text(strip_gogo(proto.read_text()))
        generated = Path(work) / "out"
        generated.mkdir()
        result = subprocess.run(
            [sys.executable, "-m", "grpc_tools.protoc", f"-I{Path(work) / 'in'}",
             f"--python_out={generated}", f"--grpc_python_out={generated}", str(source)],
            capture_output=True, text=True,
        )  # fmt: skip
        if result.returncode:
            raise SystemExit(f"deviceplugin_stubs: protoc failed: {result.stderr.strip()}")
        out.mkdir(parents=True, exist_ok=True)
        for name in OUTPUTS:
            shutil.copyfile(generated / PACKAGE_DIR / name, out / f".{name}.tmp")
            (out / f".{name}.tmp").rename(out / name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--proto", type=Path, default=REPO / "build/kubelet-proto/api.proto")
    parser.add_argument("--out", type=Path, default=REPO / PACKAGE_DIR)
    args = parser.parse_args()
    if not args.proto.is_file():
        raise SystemExit(
            f"deviceplugin_stubs: {args.proto}: no such file (scripts/kubelet-proto.sh makes it)"
        )
    generate(args.proto, args.out)


if __name__ == "__main__":
    main()
