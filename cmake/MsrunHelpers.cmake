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
    if(_type STREQUAL "EXECUTABLE" AND MSRUN_SANITIZE MATCHES "address")
      # the runtime's defaults for this project (why: the file's comment)
      target_sources(${target} PRIVATE ${PROJECT_SOURCE_DIR}/cmake/sanitizer_options.c)
    endif()
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

# msrun_grpc: what links gRPC. A target whose MSRUN_GRPC_STATIC property is
# true (the msrun executable) gets Debian's static archives of gRPC and its
# libraries (abseil, upb, re2, c-ares, OpenSSL, zlib) in one rescanned
# group; every other target, and every target where an archive is missing
# or MSRUN_STATIC_GRPC is OFF, the shared libraries. Loading gRPC's ~50
# shared libraries is most of an msrun start that does nothing else
# (docs/performance.md, "gRPC linked statically into msrun"); workers never
# load gRPC (libmsrun), so only msrun's own processes are concerned.
function(msrun_grpc_target)
  add_library(msrun_grpc INTERFACE)
  set(_archives "")
  set(_missing "")
  if(MSRUN_STATIC_GRPC)
    # the C library's and the compiler's own stay shared
    set(_shared dl pthread rt atomic m)
    set(_names ${GRPC_STATIC_LIBRARIES})
    list(REMOVE_DUPLICATES _names)
    foreach(_l IN LISTS _names)
      if(_l IN_LIST _shared)
        continue()
      endif()
      find_library(_a NAMES lib${_l}.a HINTS ${GRPC_STATIC_LIBRARY_DIRS} NO_CACHE)
      if(_a)
        list(APPEND _archives ${_a})
      else()
        list(APPEND _missing ${_l})
      endif()
      unset(_a)
    endforeach()
  endif()
  if(NOT MSRUN_STATIC_GRPC)
    message(STATUS "msrun: MSRUN_STATIC_GRPC=OFF: the msrun executable loads gRPC's shared libraries")
  elseif(_missing)
    message(STATUS "msrun: no static archive of ${_missing}: the msrun executable loads "
      "gRPC's shared libraries")
  else()
    list(LENGTH _archives _n)
    message(STATUS "msrun: the msrun executable links gRPC from ${_n} static archives")
    list(JOIN _archives "," _group)
    set(_static "$<BOOL:$<TARGET_PROPERTY:MSRUN_GRPC_STATIC>>")
    target_link_libraries(msrun_grpc INTERFACE
      "$<${_static}:$<LINK_GROUP:RESCAN,${_group}>>"
      "$<${_static}:stdc++>" "$<${_static}:m>" "$<${_static}:atomic>" "$<${_static}:rt>"
      "$<${_static}:${CMAKE_DL_LIBS}>" "$<${_static}:Threads::Threads>"
      "$<$<NOT:${_static}>:PkgConfig::GRPC>")
    # rendezvous/rpc.c finds two of abseil's functions with dlsym (the
    # mutexes' deadlock detection switched off, the CPU frequency probe
    # made early): linked statically, they must be pulled in and exported
    # (the same candidate names as rpc.c's)
    foreach(_sym
        _ZN4absl7debian329SetMutexDeadlockDetectionModeENS0_15OnDeadlockCycleE
        _ZN4absl7debian229SetMutexDeadlockDetectionModeENS0_15OnDeadlockCycleE
        _ZN4absl7debian429SetMutexDeadlockDetectionModeENS0_15OnDeadlockCycleE
        _ZN4absl29SetMutexDeadlockDetectionModeENS_15OnDeadlockCycleE
        _ZN4absl7debian313base_internal19NominalCPUFrequencyEv
        _ZN4absl7debian213base_internal19NominalCPUFrequencyEv
        _ZN4absl7debian413base_internal19NominalCPUFrequencyEv
        _ZN4absl13base_internal19NominalCPUFrequencyEv)
      target_link_options(msrun_grpc INTERFACE "$<${_static}:LINKER:--undefined=${_sym}>"
        "$<${_static}:LINKER:--export-dynamic-symbol=${_sym}>")
    endforeach()
    # the headers, whichever way it links
    target_include_directories(msrun_grpc INTERFACE ${GRPC_INCLUDE_DIRS})
    set_property(GLOBAL PROPERTY MSRUN_GRPC_STATIC_LINKED 1)
    return()
  endif()
  target_link_libraries(msrun_grpc INTERFACE PkgConfig::GRPC)
  set_property(GLOBAL PROPERTY MSRUN_GRPC_STATIC_LINKED 0)
endfunction()
