# Runs at install time (install(SCRIPT), component server): writes the systemd unit and
# installs the default config for the prefix this install runs with — `cmake --install
# --prefix P`, or /usr when CPack builds the Debian packages (its DEB generator installs with
# DESTDIR the staging directory and CMAKE_INSTALL_PREFIX the packaged prefix). Expects
# KVATLAS_SOURCE_DIR and KVATLAS_BINARY_DIR (set by an install(CODE) before it).
if(CMAKE_INSTALL_PREFIX STREQUAL "/usr")
  set(etc "/etc")  # the GNU and Debian convention: /usr's configuration is in /etc
else()
  set(etc "${CMAKE_INSTALL_PREFIX}/etc")
endif()
set(KVATLAS_BINDIR "${CMAKE_INSTALL_PREFIX}/bin")
set(KVATLAS_CONFIG "${etc}/kvatlas/kvatlas.json")
set(KVATLAS_DOCDIR "${CMAKE_INSTALL_PREFIX}/share/doc/kvatlas-server")

# Installs of several prefixes may run from one build tree at once (tests): one scratch
# file per destination.
string(MD5 destination "$ENV{DESTDIR}|${CMAKE_INSTALL_PREFIX}")
set(scratch "${KVATLAS_BINARY_DIR}/install-scratch/${destination}")
configure_file("${KVATLAS_SOURCE_DIR}/deploy/systemd/kvatlas-server.service.in"
               "${scratch}/kvatlas-server.service" @ONLY)
file(INSTALL "${scratch}/kvatlas-server.service"
     DESTINATION "${CMAKE_INSTALL_PREFIX}/lib/systemd/system")
file(INSTALL "${KVATLAS_SOURCE_DIR}/deploy/debian/kvatlas.json" DESTINATION "${etc}/kvatlas")
file(INSTALL "${KVATLAS_SOURCE_DIR}/docs/operations.md" "${KVATLAS_SOURCE_DIR}/docs/api.md"
             "${KVATLAS_SOURCE_DIR}/docs/security.md"
     DESTINATION "${KVATLAS_DOCDIR}")
