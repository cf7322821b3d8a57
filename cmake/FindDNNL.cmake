# Finds oneDNN (Debian: libdnnl-dev) for the bf16 products' onednn path.
# Sets DNNL_FOUND and the imported target msrun::dnnl. Only the header and
# the library are looked for: oneDNN's own CMake package also wants its
# GPU runtime's (OpenCL's) development files, which the CPU path needs not.
find_path(DNNL_INCLUDE_DIR oneapi/dnnl/dnnl.h)
find_library(DNNL_LIBRARY dnnl)
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(DNNL REQUIRED_VARS DNNL_LIBRARY DNNL_INCLUDE_DIR)
if(DNNL_FOUND AND NOT TARGET msrun::dnnl)
  add_library(msrun::dnnl UNKNOWN IMPORTED)
  set_target_properties(msrun::dnnl PROPERTIES IMPORTED_LOCATION "${DNNL_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${DNNL_INCLUDE_DIR}")
endif()
mark_as_advanced(DNNL_INCLUDE_DIR DNNL_LIBRARY)
