# Cross-compiles kvatlas for arm64 (aarch64 Linux, e.g. a DPU's ARM cores) on an amd64 Debian
# host: Debian's cross compiler (crossbuild-essential-arm64, aarch64-linux-gnu-g++ 12) against
# an arm64 sysroot holding the :arm64 build dependencies, which scripts/cross builds with
# mmdebstrap (docs/operations.md §arm64). The host's own packages are never replaced: many
# Debian -dev packages are not Multi-Arch: same, so installing them as :arm64 would remove
# the amd64 ones.
#
# KVATLAS_ARM64_SYSROOT (cache variable or environment) is the sysroot; default
# ~/.cache/kvatlas-arm64/sysroot. Binaries run under qemu-aarch64-static with the sysroot as
# its library prefix (CMAKE_CROSSCOMPILING_EMULATOR: ctest and doctest use it).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)

if(NOT KVATLAS_ARM64_SYSROOT)
  if(DEFINED ENV{KVATLAS_ARM64_SYSROOT})
    set(KVATLAS_ARM64_SYSROOT "$ENV{KVATLAS_ARM64_SYSROOT}")
  else()
    set(KVATLAS_ARM64_SYSROOT "$ENV{HOME}/.cache/kvatlas-arm64/sysroot")
  endif()
endif()
set(KVATLAS_ARM64_SYSROOT "${KVATLAS_ARM64_SYSROOT}" CACHE PATH "The arm64 sysroot (scripts/cross)")
if(NOT EXISTS "${KVATLAS_ARM64_SYSROOT}/usr/include/aarch64-linux-gnu")
  message(FATAL_ERROR "no arm64 sysroot at ${KVATLAS_ARM64_SYSROOT}: scripts/cross builds it")
endif()

set(CMAKE_SYSROOT "${KVATLAS_ARM64_SYSROOT}")
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)

# Libraries, headers and CMake packages from the sysroot only; programs from the host.
set(CMAKE_FIND_ROOT_PATH "${KVATLAS_ARM64_SYSROOT}")
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)

# pkg-config reads the sysroot's .pc files and prefixes their paths with it.
set(ENV{PKG_CONFIG_SYSROOT_DIR} "${KVATLAS_ARM64_SYSROOT}")
set(ENV{PKG_CONFIG_LIBDIR}
    "${KVATLAS_ARM64_SYSROOT}/usr/lib/aarch64-linux-gnu/pkgconfig:${KVATLAS_ARM64_SYSROOT}/usr/share/pkgconfig")
set(ENV{PKG_CONFIG_PATH} "")

find_program(KVATLAS_QEMU_AARCH64 qemu-aarch64-static)
if(KVATLAS_QEMU_AARCH64)
  set(CMAKE_CROSSCOMPILING_EMULATOR "${KVATLAS_QEMU_AARCH64};-L;${KVATLAS_ARM64_SYSROOT}")
endif()
