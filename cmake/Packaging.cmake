# Debian packages (cpack -G DEB; scripts/package builds them from a release build):
#   kvatlas-server  the server, its systemd unit, /etc/kvatlas/kvatlas.json (a conffile),
#                   the system user kvatlas and /var/lib/kvatlas (maintainer scripts in
#                   deploy/debian/)
#   kvatlas-client  the kvatlas CLI and the shared client library libkvatlas.so.N
#   kvatlas-dev     headers, libkvatlas.a, the libkvatlas.so link name, the CMake package and
#                   the pkg-config file
# Each package is an install component (COMPONENT server / client / dev on the install
# rules). Dependencies on shared libraries come from dpkg-shlibdeps (package dpkg-dev).
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME kvatlas)
set(CPACK_PACKAGE_VENDOR kvatlas)
set(CPACK_PACKAGE_CONTACT "kvatlas developers <kvatlas@localhost>")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "KV-cache block index and router for LLM serving clusters")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
# The DEB generator installs with DESTDIR=staging and CMAKE_INSTALL_PREFIX=/usr, so
# install-time scripts (cmake/InstallServerFiles.cmake) see the prefix the package installs
# into. (CPACK_SET_DESTDIR would use the build's CMAKE_INSTALL_PREFIX instead.)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL server client dev)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION net)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
# Debug information stays in the build tree: the packaged binaries are stripped.
set(CPACK_STRIP_FILES ON)

set(CPACK_DEBIAN_SERVER_PACKAGE_NAME kvatlas-server)
set(CPACK_DEBIAN_SERVER_PACKAGE_DEPENDS adduser)
set(CPACK_COMPONENT_SERVER_DESCRIPTION
    "kvatlas server\nThe global map from KV-cache block fingerprints to the engines and tiers holding\nthem: engine event ingestion, prefix lookups and routing, raft replication.")
set(_debian ${PROJECT_SOURCE_DIR}/deploy/debian)
set(CPACK_DEBIAN_SERVER_PACKAGE_CONTROL_EXTRA
    ${_debian}/conffiles ${_debian}/postinst ${_debian}/prerm ${_debian}/postrm)

set(CPACK_DEBIAN_CLIENT_PACKAGE_NAME kvatlas-client)
# A shlibs file for packages linking libkvatlas.so.0, and the ldconfig trigger.
set(CPACK_DEBIAN_CLIENT_PACKAGE_GENERATE_SHLIBS ON)
set(CPACK_COMPONENT_CLIENT_DESCRIPTION
    "kvatlas command-line client and client library\nLookups, ingest, stats, the change feed and cluster administration; libkvatlas.so\n(the C ABI, docs/abi.md).")

set(CPACK_DEBIAN_DEV_PACKAGE_NAME kvatlas-dev)
set(CPACK_DEBIAN_DEV_PACKAGE_SECTION libdevel)
set(CPACK_COMPONENT_DEV_DESCRIPTION
    "kvatlas client library (development files)\nHeaders, libraries, CMake package (find_package(kvatlas)) and pkg-config file.")
include(CPack)
