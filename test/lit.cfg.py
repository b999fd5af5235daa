# lit configuration for the k3c FileCheck tests.
import os
import lit.formats

config.name = "k3c"
config.test_format = lit.formats.ShTest(execute_external=True)
config.suffixes = [".mlir", ".test"]
config.excludes = ["unit", "reference", "gpu", "Inputs", "CMakeLists.txt"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.k3c_obj_root, "test")

# Our tools first, then FileCheck/not/count from LLVM.
config.environment["PATH"] = os.pathsep.join(
    [config.k3c_tools_dir, config.llvm_tools_dir, config.environment.get("PATH", os.environ["PATH"])])
config.substitutions.append(("%k3c_src", config.k3c_src_root))
