# What `cmake --install` and `cpack -G DEB` install: the msrun launcher,
# libmsrun (shared, with a versioned SONAME, and static), the public headers,
# a pkg-config file, a CMake package (find_package(msrun) gives
# msrun::msrun) and the Python package python/msrun. Two components, one
# Debian package each: runtime (msrun: the launcher, libmsrun.so.N, the
# Python package) and dev (msrun-dev: headers, libmsrun.a, the libmsrun.so
# link, msrun.pc, the CMake package), and a third where the torch backend is
# built (torch: msrun-torch). Included last from the top-level
# CMakeLists.txt.
include(CMakePackageConfigHelpers)

# The headers' version is the project's (msr_version() returns it).
file(STRINGS ${PROJECT_SOURCE_DIR}/include/msrun/base.h _ver_line
  REGEX "^#define MSR_VERSION_STRING")
if(NOT _ver_line MATCHES "\"${PROJECT_VERSION}\"")
  message(FATAL_ERROR "include/msrun/base.h: MSR_VERSION_STRING (${_ver_line}) is not the "
    "project's version ${PROJECT_VERSION}")
endif()

# libmsrun.a: the same objects as libmsrun.so, for programs linked whole
# (pkg-config --static msrun gives its dependencies).
add_library(msrun_lib_static STATIC cmake/libmsrun.c
  $<TARGET_OBJECTS:msrun_base> $<TARGET_OBJECTS:msrun_rdzv>)
if(TARGET msrun_comm)
  target_sources(msrun_lib_static PRIVATE $<TARGET_OBJECTS:msrun_comm>)
endif()
if(TARGET msrun_ps)
  target_sources(msrun_lib_static PRIVATE $<TARGET_OBJECTS:msrun_ps>)
endif()
msrun_target_setup(msrun_lib_static)
set_target_properties(msrun_lib_static PROPERTIES OUTPUT_NAME msrun)
set_target_properties(msrun_lib PROPERTIES EXPORT_NAME msrun)

set(_cmakedir ${CMAKE_INSTALL_LIBDIR}/cmake/msrun)
set(CMAKE_INSTALL_DEFAULT_COMPONENT_NAME runtime)
install(TARGETS msrun_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT runtime)
install(TARGETS msrun_lib EXPORT msrunTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT runtime NAMELINK_COMPONENT dev
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
# the gRPC client libmsrun loads beside itself for direct mode (rendezvous/rpc_dl.h)
install(TARGETS msrun_grpc_plugin LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT runtime)
install(TARGETS msrun_lib_static ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT dev)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/msrun DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
  COMPONENT dev FILES_MATCHING PATTERN "*.h")
install(EXPORT msrunTargets NAMESPACE msrun:: DESTINATION ${_cmakedir} COMPONENT dev)
configure_package_config_file(cmake/msrunConfig.cmake.in
  ${PROJECT_BINARY_DIR}/install/msrunConfig.cmake INSTALL_DESTINATION ${_cmakedir})
# 0.x: a new minor version may change the API; the SONAME is the major one
write_basic_package_version_file(${PROJECT_BINARY_DIR}/install/msrunConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMajorVersion)
install(FILES ${PROJECT_BINARY_DIR}/install/msrunConfig.cmake
  ${PROJECT_BINARY_DIR}/install/msrunConfigVersion.cmake DESTINATION ${_cmakedir} COMPONENT dev)

# msrun.pc: the prefix relative to the file (lib/pkgconfig -> ../..), and
# what a static link needs besides libmsrun.a (the shared library carries
# its own dependencies).
set(_pcdir ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
file(RELATIVE_PATH MSRUN_PC_TO_PREFIX /prefix/${_pcdir} /prefix)
string(REGEX REPLACE "/$" "" MSRUN_PC_TO_PREFIX "${MSRUN_PC_TO_PREFIX}")
set(MSRUN_PC_REQUIRES_PRIVATE "grpc gpr libprotobuf-c ucx")
set(MSRUN_PC_LIBS_PRIVATE "-pthread -lm")
if(CMAKE_DL_LIBS)
  string(APPEND MSRUN_PC_LIBS_PRIVATE " -l${CMAKE_DL_LIBS}") # dlopen of CUDA and NCCL
endif()
configure_file(cmake/msrun.pc.in ${PROJECT_BINARY_DIR}/install/msrun.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/install/msrun.pc DESTINATION ${_pcdir} COMPONENT dev)

# The Python package (python/msrun, ctypes over libmsrun.so): under the
# prefix where Debian's python3 looks (lib/python3/dist-packages: under /usr
# that is on python3's path; under another prefix, put it on PYTHONPATH),
# with _install.py, which gives the library's place relative to the package.
set(MSRUN_PYTHON_DIR lib/python3/dist-packages CACHE STRING
  "Where the Python package msrun is installed (relative to the prefix)")
file(STRINGS ${PROJECT_SOURCE_DIR}/python/msrun/_lib.py _py_major REGEX "^SONAME_MAJOR = ")
if(NOT _py_major STREQUAL "SONAME_MAJOR = ${PROJECT_VERSION_MAJOR}")
  message(FATAL_ERROR "python/msrun/_lib.py: ${_py_major} is not the project's major version "
    "${PROJECT_VERSION_MAJOR}")
endif()
set(_py_lib libmsrun.so.${PROJECT_VERSION_MAJOR})
if(IS_ABSOLUTE "${MSRUN_PYTHON_DIR}" OR IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}")
  set(MSRUN_PY_LIBRARY ${CMAKE_INSTALL_FULL_LIBDIR}/${_py_lib})
else()
  file(RELATIVE_PATH MSRUN_PY_LIBRARY /prefix/${MSRUN_PYTHON_DIR}/msrun
    /prefix/${CMAKE_INSTALL_LIBDIR}/${_py_lib})
endif()
file(CONFIGURE OUTPUT ${PROJECT_BINARY_DIR}/install/python/_install.py CONTENT
  "\"\"\"Written by cmake --install: libmsrun's place, relative to this package.\"\"\"\n\nLIBRARY = \"@MSRUN_PY_LIBRARY@\"\n"
  @ONLY)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/python/msrun DESTINATION ${MSRUN_PYTHON_DIR}
  COMPONENT runtime FILES_MATCHING PATTERN "*.py" PATTERN "_install.py" EXCLUDE
  PATTERN "torch.py" EXCLUDE PATTERN "__pycache__" EXCLUDE)
if(MSRUN_HAVE_TORCH_BACKEND)
  install(FILES ${PROJECT_SOURCE_DIR}/python/msrun/torch.py DESTINATION ${MSRUN_PYTHON_DIR}/msrun
    COMPONENT torch)
endif()
install(FILES ${PROJECT_BINARY_DIR}/install/python/_install.py
  DESTINATION ${MSRUN_PYTHON_DIR}/msrun COMPONENT runtime)

# cpack -G DEB: msrun_V_ARCH.deb (runtime) and msrun-dev_V_ARCH.deb (dev,
# depending on msrun of the same version), the files under /usr, libraries
# in the multiarch directory (CMAKE_INSTALL_LIBDIR, top-level CMakeLists).
# The runtime package's Depends come from dpkg-shlibdeps, which reads what
# the binaries need (libmsrun needs no CUDA library: it loads CUDA and NCCL
# with dlopen); without dpkg-shlibdeps, the Debian 12 names of the same
# libraries.
set(CPACK_PACKAGE_NAME msrun)
set(CPACK_PACKAGE_VENDOR msrun)
set(CPACK_PACKAGE_CONTACT "msrun developers")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
  "per-node launcher and C runtime for distributed training")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_GENERATOR DEB)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION devel)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
find_program(MSRUN_DPKG_SHLIBDEPS dpkg-shlibdeps)
mark_as_advanced(MSRUN_DPKG_SHLIBDEPS)
if(MSRUN_DPKG_SHLIBDEPS)
  set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
else()
  set(CPACK_DEBIAN_PACKAGE_DEPENDS
    "libc6, libevent-core-2.1-7, libevent-extra-2.1-7, libgrpc29, libprotobuf-c1, libucx0, libhwloc15, libmunge2")
endif()
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL runtime dev)
# the torch.distributed backend, where it was built: msrun-torch, depending
# on msrun of the same version and on Debian's PyTorch (named here:
# dpkg-shlibdeps cannot see libmsrun, which the msrun package holds), so
# that msrun itself does not pull in PyTorch
if(MSRUN_HAVE_TORCH_BACKEND)
  list(APPEND CPACK_COMPONENTS_ALL torch)
  set(CPACK_DEBIAN_TORCH_PACKAGE_NAME msrun-torch)
  set(CPACK_DEBIAN_TORCH_PACKAGE_SECTION python)
  set(CPACK_DEBIAN_TORCH_PACKAGE_SHLIBDEPS OFF)
  set(CPACK_DEBIAN_TORCH_PACKAGE_DEPENDS
    "msrun (= ${PROJECT_VERSION}), libtorch1.13, python3-torch, libc6, libstdc++6")
  set(CPACK_COMPONENT_TORCH_DESCRIPTION
    "per-node launcher and C runtime for distributed training (PyTorch backend)\n torch.distributed's \"msrun\" backend and store: import msrun.torch.")
endif()
set(CPACK_DEBIAN_RUNTIME_PACKAGE_NAME msrun)
set(CPACK_DEBIAN_RUNTIME_PACKAGE_SECTION devel)
set(CPACK_DEBIAN_DEV_PACKAGE_NAME msrun-dev)
set(CPACK_DEBIAN_DEV_PACKAGE_SECTION libdevel)
set(CPACK_DEBIAN_DEV_PACKAGE_SHLIBDEPS OFF) # headers and libmsrun.a: no shared object
set(CPACK_DEBIAN_DEV_PACKAGE_DEPENDS "msrun (= ${PROJECT_VERSION})")
set(CPACK_COMPONENT_RUNTIME_DESCRIPTION
  "per-node launcher and C runtime for distributed training\n msrun, libmsrun.so and the Python package msrun.")
set(CPACK_COMPONENT_DEV_DESCRIPTION
  "per-node launcher and C runtime for distributed training (development files)\n Headers, libmsrun.a, msrun.pc and the CMake package of libmsrun.")
# the Python package needs python3 (and NumPy or PyTorch for arrays);
# pkg-config msrun needs the .pc files of libmsrun's own dependencies
# (Requires.private); find_package(msrun) needs nothing more
set(CPACK_DEBIAN_RUNTIME_PACKAGE_SUGGESTS "python3, python3-numpy")
set(CPACK_DEBIAN_DEV_PACKAGE_SUGGESTS "pkg-config, libgrpc-dev, libprotobuf-c-dev, libucx-dev")
include(CPack)

# msrun gives Python workers PYTHONPATH and MSRUN_LIBRARY from its own
# place (msrun/workers.c): installed, PREFIX/bin/msrun finds the package
# and the library where this install puts them.
set_source_files_properties(${PROJECT_SOURCE_DIR}/msrun/workers.c TARGET_DIRECTORY msrun_launcher PROPERTIES
  COMPILE_DEFINITIONS
  "MSRUN_INSTALL_LIBDIR=\"${CMAKE_INSTALL_LIBDIR}\";MSRUN_INSTALL_PYDIR=\"${MSRUN_PYTHON_DIR}\"")
