# Helpers shared by every module's CMakeLists.

# Sources generated at build time (rendezvous/msrun.pb-c.h), under their
# module's folder name.
set(MSRUN_GENERATED_DIR ${PROJECT_BINARY_DIR}/generated)

# The folders that are modules (docs/architecture.md, section 2). A target in
# one of them sees only its own folder and, through the targets it links,
# theirs: a file in comm/ that includes cluster/... does not compile.
set(MSRUN_MODULE_DIRS base rendezvous cluster msrun comm ps layout model parallel planner programs)

# The include root of module dir: a folder holding only a link to the
# module's sources, so "dir/x.h" resolves there and nothing else does. The
# link is named dir, or MSRUN_MODULE_PREFIX_<dir> when the module's folder
# sets one (msrun/: "launcher", so that "msrun/x.h" names only the public
# headers of include/msrun/).
function(msrun_module_root dir out_var)
  set(_root ${PROJECT_BINARY_DIR}/module_roots/${dir})
  set(_name ${dir})
  if(DEFINED MSRUN_MODULE_PREFIX_${dir})
    set(_name ${MSRUN_MODULE_PREFIX_${dir}})
  endif()
  if(NOT _name STREQUAL dir AND IS_SYMLINK ${_root}/${dir})
    file(REMOVE ${_root}/${dir}) # a build from before the module had a prefix
  endif()
  if(NOT EXISTS ${_root}/${_name})
    file(MAKE_DIRECTORY ${_root})
    file(CREATE_LINK ${PROJECT_SOURCE_DIR}/${dir} ${_root}/${_name} SYMBOLIC)
  endif()
  set(${out_var} ${_root} PARENT_SCOPE)
endfunction()

# Common settings for a target of this project: C11, warnings, visibility,
# include roots and the chosen sanitizers. A target defined in a module's
# folder gets that module's root PUBLIC (its dependencies' roots come with
# target_link_libraries); tests, benchmarks and examples see the whole tree.
# Every target sees the public headers (include/).
function(msrun_target_setup target)
  file(RELATIVE_PATH _rel ${PROJECT_SOURCE_DIR} ${CMAKE_CURRENT_SOURCE_DIR})
  string(REGEX REPLACE "/.*" "" _top "${_rel}")
  if(_top IN_LIST MSRUN_MODULE_DIRS)
    msrun_module_root(${_top} _root)
    target_include_directories(${target} PUBLIC $<BUILD_INTERFACE:${_root}>)
  else()
    target_include_directories(${target} PRIVATE ${PROJECT_SOURCE_DIR} ${MSRUN_GENERATED_DIR})
  endif()
  target_include_directories(${target} PUBLIC
    $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
    $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
  get_target_property(_type ${target} TYPE)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:C>:-Wall -Wextra -Wshadow -Wno-missing-field-initializers>
    $<$<AND:$<COMPILE_LANGUAGE:C>,$<BOOL:${MSRUN_WERROR}>>:-Werror>)
  set_target_properties(${target} PROPERTIES
    C_VISIBILITY_PRESET hidden
    POSITION_INDEPENDENT_CODE ON)
  target_compile_definitions(${target} PRIVATE _GNU_SOURCE)
  if(MSRUN_FUZZ)
    # coverage for libFuzzer in every module the fuzz targets link
    target_compile_options(${target} PRIVATE -fsanitize=fuzzer-no-link)
  endif()
  if(MSRUN_SANITIZE)
    target_compile_options(${target} PRIVATE -fsanitize=${MSRUN_SANITIZE} -fno-omit-frame-pointer
      -fno-sanitize-recover=all)
    target_link_options(${target} PRIVATE -fsanitize=${MSRUN_SANITIZE})
  endif()
endfunction()

# A module: a static library of position-independent objects that the shared
# libmsrun and the executables link.
function(msrun_module name)
  add_library(${name} STATIC ${ARGN})
  msrun_target_setup(${name})
endfunction()

function(msrun_executable name)
  add_executable(${name} ${ARGN})
  msrun_target_setup(${name})
endfunction()

# CUDA and NCCL are optional: found, or skipped with one message.
macro(msrun_find_cuda)
  set(MSRUN_HAVE_CUDA OFF)
  set(MSRUN_HAVE_CUDA_KERNELS OFF)
  if(MSRUN_CUDA)
    find_package(CUDAToolkit QUIET)
    find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda/include)
    find_library(NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} /usr/local/cuda/lib64)
    if(CUDAToolkit_FOUND AND NCCL_INCLUDE_DIR AND NCCL_LIBRARY)
      set(MSRUN_HAVE_CUDA ON)
      # NCCL has no CMake package: an imported target of its own (its
      # headers are system headers, like CUDA's)
      if(NOT TARGET msrun::nccl)
        add_library(msrun::nccl UNKNOWN IMPORTED)
        set_target_properties(msrun::nccl PROPERTIES IMPORTED_LOCATION "${NCCL_LIBRARY}"
          INTERFACE_INCLUDE_DIRECTORIES "${NCCL_INCLUDE_DIR}")
      endif()
      message(STATUS "msrun: CUDA ${CUDAToolkit_VERSION} and NCCL found: building the GPU parts")
      # The CUDA training path (parallel/cuda) needs nvcc as well; default
      # architecture sm_90 (H100/H200), overridable with
      # -DCMAKE_CUDA_ARCHITECTURES=...
      set(MSRUN_HAVE_CUDA_KERNELS OFF)
      if(NOT CMAKE_CUDA_COMPILER AND CUDAToolkit_NVCC_EXECUTABLE)
        set(CMAKE_CUDA_COMPILER ${CUDAToolkit_NVCC_EXECUTABLE})
      endif()
      include(CheckLanguage)
      check_language(CUDA)
      if(CMAKE_CUDA_COMPILER)
        if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
          set(CMAKE_CUDA_ARCHITECTURES 90)
        endif()
        enable_language(CUDA)
        set(MSRUN_HAVE_CUDA_KERNELS ON)
        message(STATUS "msrun: nvcc found: building the CUDA training path for "
          "architectures ${CMAKE_CUDA_ARCHITECTURES}")
      else()
        message(STATUS "msrun: no nvcc: the CUDA training path (train_gpt --device cuda) is skipped")
      endif()
    else()
      message(STATUS "msrun: CUDA or NCCL not found: the GPU parts are skipped")
    endif()
  else()
    message(STATUS "msrun: MSRUN_CUDA=OFF: the GPU parts are skipped")
  endif()
endmacro()
