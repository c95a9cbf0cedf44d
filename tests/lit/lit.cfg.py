# lit configuration for pkc's FileCheck tests.  Run: lit -v tests/lit
#
# Substitutions (as whole words in RUN lines):
#   pkc-opt    -> <this python> -m pkc.tools.pkc_opt   (the repo's code, not a stale install)
#   FileCheck  -> filecheck                             (the Python clone, the script beside this python)
#   mlir-opt   -> mlir-opt-22 (Debian's mlir-22-tools)  feature `mlir-opt` when it is found
#                 (env MLIR_OPT=<path> picks another binary, MLIR_OPT= turns it off)
#   %python    -> <this python>
#   (lit's own %s, %S, %t work as usual; helper files go in <dir>/Inputs/, not run)
# Tests live in subfolders by owner: tools/ (pkc-opt itself), dialects/ ... (pk IR).

import os
import shutil
import sys

import lit.formats

config.name = "pkc"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".mlir"]
config.excludes = ["Inputs", "lit.cfg.py"]
config.test_source_root = os.path.dirname(os.path.abspath(__file__))
config.test_exec_root = config.test_source_root

repo_root = os.path.dirname(os.path.dirname(config.test_source_root))

# The repo's own package first, whatever is installed; keep PATH/HOME for the tools.
config.environment["PYTHONPATH"] = os.pathsep.join(
    p for p in [repo_root, os.environ.get("PYTHONPATH", "")] if p
)
for var in ("PATH", "HOME", "TMPDIR", "LANG", "LC_ALL"):
    if var in os.environ:
        config.environment[var] = os.environ[var]
config.environment["COLUMNS"] = "100"  # stable --help wrapping
config.environment.pop("PKC_DEBUG", None)

python = f'"{sys.executable}"'


def word(name):
    """A regex matching `name` as a command word, not inside a path or a longer name."""
    return r"(?<![\w./%-])" + name.replace("-", r"\-") + r"(?![\w.-])"


# Each Python command names its PYTHONPATH itself (lit's `env`): lit 23's external
# builtins (`diff`) overwrite PYTHONPATH in the test's shared environment, so a command
# after a `diff` on the same test would no longer find pkc ("No module named 'pkc'").
python_env = f'env "PYTHONPATH={config.environment["PYTHONPATH"]}" {python}'
config.substitutions.append(("%python", python_env))
config.substitutions.append((word("pkc-opt"), f"{python_env} -m pkc.tools.pkc_opt"))
# The filecheck script next to this python where there is one: on PATH, `filecheck` may be
# a pyenv shim (a bash script that runs `pyenv exec`), which costs more CPU than the check
# itself: 0.28 s against 0.17 s per run measured on the 2-core machine, ~200 runs per lit.
filecheck = (shutil.which("filecheck", path=os.path.dirname(sys.executable))
             or shutil.which("filecheck"))
if filecheck is None:
    lit_config.fatal("`filecheck` not found: pip install filecheck (or pip install -e '.[test]')")
config.substitutions.append((word("FileCheck"), f'"{filecheck}"'))


def find_mlir_opt():
    # MLIR_OPT=/path/to/mlir-opt picks another binary; MLIR_OPT= (empty) turns it off.
    if "MLIR_OPT" in os.environ:
        return shutil.which(os.environ["MLIR_OPT"]) if os.environ["MLIR_OPT"] else None
    for candidate in ("mlir-opt-22", "mlir-opt", "/usr/lib/llvm-22/bin/mlir-opt"):
        path = shutil.which(candidate)
        if path:
            return path
    return None


mlir_opt = find_mlir_opt()
if mlir_opt:
    config.available_features.add("mlir-opt")
    config.substitutions.append((word("mlir-opt"), f'"{mlir_opt}"'))
else:
    lit_config.warning(
        "mlir-opt-22 not found (apt-get install mlir-22-tools): "
        "tests that REQUIRE mlir-opt are UNSUPPORTED"
    )
