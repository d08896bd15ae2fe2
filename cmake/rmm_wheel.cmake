# RMM's C++ library as PyPI's `librmm-cu13` wheel ships it, unpacked by ci/gpu/fetch-rmm.sh, as
# one imported target. Used by alloc_bench's RMM comparison (FAULTLINE_RMM_ROOT) and by the
# standalone clients in ci/gpu/rmm_client (RMM_ROOT).
#
# The wheel carries its own CMake package (lib64/cmake/rmm), but that needs CMake >= 3.30.4 and
# finds CCCL, nvtx3 and rapids_logger through package searches; this wires the same target by
# hand on CMake 3.25, with what rmm-targets.cmake and rmm-dependencies.cmake say:
#   - the wheel's CCCL (include/rapids) first on the include path: the toolkit's own CCCL is
#     older (CUDA 13.0 ships 3.0; RMM 26.04 needs 3.3, 26.06 needs 3.4);
#   - CCCL's interface definitions as RMM sets them (no CUB/Thrust namespace magic, no PDL);
#   - librmm.so and librapids_logger.so, and the static cudart (librmm.so carries its own
#     static cudart too, as every RAPIDS wheel does; a client links one for its inline code).
# Include directories of an imported target are SYSTEM, so -Werror never sees RMM's headers.
#
#   faultline_import_rmm_wheel(${FAULTLINE_RMM_ROOT} faultline_rmm)
#   target_link_libraries(prog PRIVATE faultline_rmm)
#   faultline_rmm_carry_rpath(prog)   # finds the libraries in ../lib/rmm-<series> when carried
#
# Sets in the caller's scope: <target>_VERSION (e.g. 26.06.00), <target>_SERIES (26.06) and
# <target>_HAS_PROCESS_IS_EXITING (ON when rmm/process_is_exiting.hpp exists).

function(faultline_import_rmm_wheel root target)
  get_filename_component(root "${root}" ABSOLUTE)
  set(rmm_lib "${root}/librmm/lib64/librmm.so")
  set(logger_lib "${root}/rapids_logger/lib64/librapids_logger.so")
  foreach(required IN ITEMS "${rmm_lib}" "${logger_lib}" "${root}/librmm/include/rmm/mr/pool_memory_resource.hpp"
                            "${root}/librmm/include/rapids/cuda/memory_resource" "${root}/librmm/VERSION")
    if(NOT EXISTS "${required}")
      message(FATAL_ERROR "RMM wheel at '${root}': ${required} is missing "
                          "(unpack it with ci/gpu/fetch-rmm.sh SERIES DEST)")
    endif()
  endforeach()
  if(NOT TARGET CUDA::cudart_static)
    find_package(CUDAToolkit REQUIRED)
  endif()
  file(READ "${root}/librmm/VERSION" version)
  string(STRIP "${version}" version)
  string(REGEX MATCH "^[0-9]+\\.[0-9]+" series "${version}")

  add_library(${target} INTERFACE IMPORTED)
  set_target_properties(${target} PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES
      "${root}/librmm/include/rapids;${root}/librmm/include;${root}/rapids_logger/include"
    INTERFACE_COMPILE_DEFINITIONS
      "CUB_DISABLE_NAMESPACE_MAGIC;CUB_IGNORE_NAMESPACE_MAGIC_ERROR;THRUST_DISABLE_ABI_NAMESPACE;THRUST_IGNORE_ABI_NAMESPACE_ERROR;CCCL_DISABLE_PDL"
    INTERFACE_LINK_LIBRARIES "${rmm_lib};${logger_lib};CUDA::cudart_static;${CMAKE_DL_LIBS}")

  set(${target}_VERSION "${version}" PARENT_SCOPE)
  set(${target}_SERIES "${series}" PARENT_SCOPE)
  if(EXISTS "${root}/librmm/include/rmm/process_is_exiting.hpp")
    set(${target}_HAS_PROCESS_IS_EXITING ON PARENT_SCOPE)
  else()
    set(${target}_HAS_PROCESS_IS_EXITING OFF PARENT_SCOPE)
  endif()
  message(STATUS "RMM wheel ${version} at ${root}")
endfunction()

# faultline_rmm_carry_rpath(<target> <series>): the program also looks for librmm.so and
# librapids_logger.so in $ORIGIN/../lib/rmm-<series>, and for other libraries in $ORIGIN/../lib,
# where ci/gpu/rmm-carry.sh puts them (one folder per release: both ship a librmm.so). The build
# tree's absolute paths stay in the RUNPATH too, so the program also runs in place.
function(faultline_rmm_carry_rpath target series)
  set_property(TARGET ${target} APPEND PROPERTY BUILD_RPATH "\$ORIGIN/../lib/rmm-${series}" "\$ORIGIN/../lib")
endfunction()
