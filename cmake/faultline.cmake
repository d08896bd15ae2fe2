# Shared build helpers: warnings, sanitizers, CUDA detection and test registration.

# Warnings as errors on project code only (third-party headers come in as SYSTEM).
function(faultline_target_warnings target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor -Werror>)
endfunction()

if(FAULTLINE_SANITIZE)
  if(NOT FAULTLINE_SANITIZE MATCHES "^(address,undefined|undefined,address|address|undefined|thread)$")
    message(FATAL_ERROR "FAULTLINE_SANITIZE must be 'address,undefined' or 'thread', got '${FAULTLINE_SANITIZE}'")
  endif()
  add_compile_options(-fsanitize=${FAULTLINE_SANITIZE} -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
  add_link_options(-fsanitize=${FAULTLINE_SANITIZE})
endif()

macro(faultline_find_cuda)
  set(FAULTLINE_HAVE_CUDA OFF)
  if(NOT FAULTLINE_CUDA STREQUAL "OFF")
    find_package(CUDAToolkit QUIET)
    if(CUDAToolkit_FOUND)
      set(FAULTLINE_HAVE_CUDA ON)
      message(STATUS "faultline: cuda backend ON (toolkit ${CUDAToolkit_VERSION})")
    elseif(FAULTLINE_CUDA STREQUAL "ON")
      message(FATAL_ERROR "FAULTLINE_CUDA=ON but the CUDA toolkit was not found")
    else()
      message(STATUS "faultline: cuda backend OFF (toolkit not found)")
    endif()
  endif()
endmacro()

# faultline_add_gtest(NAME name SOURCES a.cc b.cc LIBS lib... [TIMEOUT seconds] [RESOURCE_LOCK lock])
# One gtest executable, its tests discovered into CTest with a per-test TIMEOUT (and, when given,
# a RESOURCE_LOCK: tests holding the same lock never run at once). Death tests use the
# "threadsafe" style (re-exec of the binary), set in faultline::test_main. Its sources compile
# FAULTLINE_UNITY_TESTS to a translation unit (see the top-level CMakeLists.txt).
function(faultline_add_gtest)
  cmake_parse_arguments(arg "" "NAME;TIMEOUT;RESOURCE_LOCK" "SOURCES;LIBS" ${ARGN})
  if(NOT FAULTLINE_TESTS)
    return()
  endif()
  if(NOT arg_TIMEOUT)
    set(arg_TIMEOUT 120)
  endif()
  add_executable(${arg_NAME} ${arg_SOURCES})
  target_link_libraries(${arg_NAME} PRIVATE ${arg_LIBS} faultline_test_main GTest::gtest GTest::gmock)
  target_include_directories(${arg_NAME} PRIVATE ${PROJECT_SOURCE_DIR})
  faultline_target_warnings(${arg_NAME})
  # The tests' own code is compiled without optimisation, in every build type: a GoogleTest file
  # took 15 s at -O0 against 48 s at -O2 here, and what a test measures runs in the libraries it
  # links, which keep the build's flags (no test asserts a time). The last -O wins.
  target_compile_options(${arg_NAME} PRIVATE -O0)
  # Under UBSan, the tests' own code leaves out the null and alignment checks: GCC puts them on
  # every member access and reference binding, and in GoogleTest's templates they took a quarter
  # of a test unit's compile (a harness_test unit: 39 s against 31 s). The libraries the tests
  # call keep every check, and ASan still catches a null dereference in a test.
  if(FAULTLINE_SANITIZE MATCHES "undefined")
    target_compile_options(${arg_NAME} PRIVATE -fno-sanitize=null,alignment)
  endif()
  if(FAULTLINE_UNITY_TESTS)
    set_target_properties(${arg_NAME} PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE ${FAULTLINE_UNITY_TESTS})
  endif()
  set(props TIMEOUT ${arg_TIMEOUT})
  if(arg_RESOURCE_LOCK)
    list(APPEND props RESOURCE_LOCK ${arg_RESOURCE_LOCK})
  endif()
  gtest_discover_tests(${arg_NAME} DISCOVERY_MODE PRE_TEST PROPERTIES ${props})
endfunction()

# faultline_add_benchmark(NAME name SOURCES a.cc LIBS lib...)
function(faultline_add_benchmark)
  cmake_parse_arguments(arg "" "NAME" "SOURCES;LIBS" ${ARGN})
  if(NOT FAULTLINE_BENCHMARKS)
    return()
  endif()
  add_executable(${arg_NAME} ${arg_SOURCES})
  target_link_libraries(${arg_NAME} PRIVATE ${arg_LIBS} benchmark::benchmark)
  target_include_directories(${arg_NAME} PRIVATE ${PROJECT_SOURCE_DIR})
  faultline_target_warnings(${arg_NAME})
endfunction()
