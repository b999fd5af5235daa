#===- test/unit/cuda/RequireGpu.cmake - K3C_REQUIRE_GPU=1: skips fail ---===#
#
# CTest's unit/cuda_test_requires_gpu:
#   cmake -DCUDA_TEST=<path of cuda_test> -P RequireGpu.cmake
# runs a kernel test and a compiled-plan test of cuda_test twice, with
# K3C_CUDA_TEST_PLANS unset: as CI runs them (whatever cannot run skips and
# the run passes), then with K3C_REQUIRE_GPU=1 (as scripts/gpu-check.sh runs
# them), where the run must fail, with one failed test per skipped one and
# each skip's message as a failure message. Without a GPU both tests skip
# ("no GPU: ..."); on a GPU machine the kernel test passes both times and the
# plan test is the one that skips, then fails ("set K3C_CUDA_TEST_PLANS").
#
#===----------------------------------------------------------------------===#
if(NOT CUDA_TEST)
  message(FATAL_ERROR "pass -DCUDA_TEST=<path of cuda_test>")
endif()
set(filter
    "EmbedCuda.MatchesCpuBitForBit:Presets/DecodeCuda.MatchesCpuBackendAndReference/tiny_none")
unset(ENV{K3C_CUDA_TEST_PLANS})

function(run_cuda_test require out_var rc_var)
  if(require)
    set(ENV{K3C_REQUIRE_GPU} 1)
  else()
    unset(ENV{K3C_REQUIRE_GPU})
  endif()
  execute_process(COMMAND ${CUDA_TEST} --gtest_filter=${filter}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  set(${out_var} "${out}" PARENT_SCOPE)
  set(${rc_var} "${rc}" PARENT_SCOPE)
endfunction()

# gtest's closing count of `what` ("SKIPPED", "FAILED " padded to 7), 0
# when absent.
function(count_tests out what var)
  set(n 0)
  if(out MATCHES "\\[  ${what} \\] ([0-9]+) tests?[,.]")
    set(n ${CMAKE_MATCH_1})
  endif()
  set(${var} ${n} PARENT_SCOPE)
endfunction()

run_cuda_test(OFF ci ci_rc)
count_tests("${ci}" "SKIPPED" ci_skipped)
if(NOT ci_rc EQUAL 0)
  message(FATAL_ERROR "without K3C_REQUIRE_GPU the tests must pass (skip "
                      "what cannot run), got exit ${ci_rc}:\n${ci}")
endif()
if(ci_skipped LESS 1)
  message(FATAL_ERROR "expected the plan test to skip (no "
                      "K3C_CUDA_TEST_PLANS), nothing skipped:\n${ci}")
endif()
# Each skip message: the line after gtest's "<file>:<line>: Skipped".
string(REGEX MATCHALL "Skipped\n[^\n]+" skips "${ci}")

run_cuda_test(ON req req_rc)
count_tests("${req}" "SKIPPED" req_skipped)
count_tests("${req}" "FAILED " req_failed)
if(req_rc EQUAL 0)
  message(FATAL_ERROR "with K3C_REQUIRE_GPU=1 the run must fail, it "
                      "passed:\n${req}")
endif()
if(NOT req_skipped EQUAL 0 OR NOT req_failed EQUAL ci_skipped)
  message(FATAL_ERROR "with K3C_REQUIRE_GPU=1 every skip (${ci_skipped}) must "
                      "be a failure: ${req_skipped} skipped, ${req_failed} "
                      "failed:\n${req}")
endif()
foreach(skip IN LISTS skips)
  string(REPLACE "Skipped\n" "" text "${skip}")
  string(FIND "${req}" "Failed\n${text}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "the skip message '${text}' is not a failure "
                        "message under K3C_REQUIRE_GPU=1:\n${req}")
  endif()
  message(STATUS "skipped, then failed under K3C_REQUIRE_GPU=1: ${text}")
endforeach()
message(STATUS "K3C_REQUIRE_GPU=1: ${req_failed} failed where ${ci_skipped} "
               "skipped without it")
