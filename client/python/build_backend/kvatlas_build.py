"""PEP 517 build backend of the kvatlas Python package (standard library only).

build_wheel configures the repository two directories up with CMake (Release, no tests, no
benchmarks, the interpreter running this build as Python_EXECUTABLE), builds the target
kvatlas_python (the extension and the package's files, client/python/CMakeLists.txt) and
zips build/python/client/python/kvatlas/ into a wheel. Environment:
  KVATLAS_BUILD_DIR   the CMake build directory (default: <repo>/build/python)
  KVATLAS_BUILD_JOBS  parallel compile jobs (default: CMake's)
  KVATLAS_CMAKE_ARGS  extra configure arguments, space-separated
"""

import base64
import glob
import hashlib
import io
import os
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import zipfile

NAME = "kvatlas"
VERSION = "0.1.0"
HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # client/python
REPO = os.path.dirname(os.path.dirname(HERE))


def _metadata():
    return (f"Metadata-Version: 2.1\nName: {NAME}\nVersion: {VERSION}\n"
            "Summary: Python client of kvatlas, the KV-cache block map for LLM serving "
            "clusters\nRequires-Python: >=3.9\n")


def _tag():
    impl = f"cp{sys.version_info.major}{sys.version_info.minor}"
    platform = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    return f"{impl}-{impl}-{platform}"


def _build_package():
    """Builds the extension; returns the directory holding the assembled package."""
    if not os.path.exists(os.path.join(REPO, "CMakeLists.txt")):
        raise RuntimeError(f"{REPO} is not the kvatlas repository: install from a checkout "
                           "(pip install ./client/python)")
    build = os.environ.get("KVATLAS_BUILD_DIR", os.path.join(REPO, "build", "python"))
    configure = ["cmake", "-S", REPO, "-B", build, "-DCMAKE_BUILD_TYPE=Release",
                 "-DKVATLAS_BUILD_TESTS=OFF", "-DKVATLAS_BUILD_BENCH=OFF",
                 f"-DPython_EXECUTABLE={sys.executable}"]
    if shutil.which("ninja") and not os.path.exists(os.path.join(build, "CMakeCache.txt")):
        configure += ["-G", "Ninja"]
    configure += os.environ.get("KVATLAS_CMAKE_ARGS", "").split()
    subprocess.check_call(configure, stdout=sys.stderr)
    command = ["cmake", "--build", build, "--target", "kvatlas_python"]
    if os.environ.get("KVATLAS_BUILD_JOBS"):
        command += ["-j", os.environ["KVATLAS_BUILD_JOBS"]]
    subprocess.check_call(command, stdout=sys.stderr)
    package = os.path.join(build, "client", "python", NAME)
    if not glob.glob(os.path.join(package, "_kvatlas*.so")):
        raise RuntimeError(f"the extension was not built in {package}")
    return package


def _record_line(arcname, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{arcname},sha256={digest},{len(data)}"


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    package = _build_package()
    dist_info = f"{NAME}-{VERSION}.dist-info"
    wheel_name = f"{NAME}-{VERSION}-{_tag()}.whl"
    files = []
    for name in sorted(os.listdir(package)):
        path = os.path.join(package, name)
        if os.path.isfile(path) and not name.endswith(".pyc"):
            with open(path, "rb") as f:
                files.append((f"{NAME}/{name}", f.read()))
    files.append((f"{dist_info}/METADATA", _metadata().encode()))
    files.append((f"{dist_info}/WHEEL", (f"Wheel-Version: 1.0\nGenerator: kvatlas_build\n"
                                         f"Root-Is-Purelib: false\nTag: {_tag()}\n").encode()))
    record = [_record_line(a, d) for a, d in files] + [f"{dist_info}/RECORD,,"]
    files.append((f"{dist_info}/RECORD", ("\n".join(record) + "\n").encode()))
    with zipfile.ZipFile(os.path.join(wheel_directory, wheel_name), "w",
                         zipfile.ZIP_DEFLATED) as z:
        for arcname, data in files:
            z.writestr(arcname, data)
    return wheel_name


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def build_sdist(sdist_directory, config_settings=None):
    """The package's own files only: a wheel still needs the repository (the C++ client)."""
    base = f"{NAME}-{VERSION}"
    name = f"{base}.tar.gz"
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz") as tar:
        for sub in ("pyproject.toml", "build_backend", NAME, "src", "CMakeLists.txt"):
            tar.add(os.path.join(HERE, sub), arcname=f"{base}/{sub}")
        info = tarfile.TarInfo(f"{base}/PKG-INFO")
        data = _metadata().encode()
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return name
