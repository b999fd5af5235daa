#===- test/unit/runtime/PlanTests.cmake - Plan/backend/session tests ------===#
# Included from this directory's CMakeLists.txt.
k3c_add_unit_test(runtime_plan_test SOURCES Plan_test.cpp LIBS K3Runtime K3ModelMaker)
# The kernel-table test reads docs/PLAN.md from the source tree.
target_compile_definitions(runtime_plan_test PRIVATE
                           K3C_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
k3c_add_unit_test(runtime_session_test SOURCES Session_test.cpp LIBS K3Runtime K3ModelMaker)
k3c_add_unit_test(runtime_plan_binding_test SOURCES PlanBinding_test.cpp
                  LIBS K3Runtime K3ModelMaker)
k3c_add_unit_test(runtime_npy_test SOURCES Npy_test.cpp LIBS K3Runtime K3ModelMaker)
k3c_add_unit_test(runtime_differential_test SOURCES Differential_test.cpp
                  LIBS K3Runtime K3ModelMaker)
k3c_add_unit_test(runtime_executable_test SOURCES Executable_test.cpp
                  LIBS K3Runtime K3ModelMaker)
k3c_add_unit_test(runtime_k3run_tool_test SOURCES K3RunTool_test.cpp
                  LIBS K3Runtime K3ModelMaker)
add_dependencies(runtime_k3run_tool_test k3-run)
target_compile_definitions(runtime_k3run_tool_test PRIVATE
                           K3C_RUN_PATH="$<TARGET_FILE:k3-run>")
# Launch bytes, layer parts and step profiles (runtime/exec/Profile.h); the tool
# test runs the built k3-run --profile and decode_bench.
k3c_add_unit_test(runtime_profile_test SOURCES Profile_test.cpp LIBS K3Runtime K3ModelMaker)
k3c_add_unit_test(runtime_profile_tool_test SOURCES ProfileTool_test.cpp
                  LIBS K3Runtime K3ModelMaker)
add_dependencies(runtime_profile_tool_test k3-run decode_bench)
target_compile_definitions(runtime_profile_tool_test PRIVATE
                           K3C_RUN_PATH="$<TARGET_FILE:k3-run>"
                           K3C_DECODE_BENCH_PATH="$<TARGET_FILE:decode_bench>")
# Their decode plans come from the built k3c (CompiledPlan.h).
foreach(t runtime_plan_test runtime_session_test runtime_differential_test
          runtime_k3run_tool_test runtime_profile_test
          runtime_profile_tool_test)
  k3c_use_compiled_plans(${t})
endforeach()
