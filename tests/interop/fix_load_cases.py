# SPDX-License-Identifier: GPL-3.0-or-later
"""`optscope-cli fix` on the load cases that do not load (tests/data/load_cases), then real PyTorch 2.6 on the fixed
files: diagnose finds no error in them any more, every load path that failed before now loads (or fails only for a
reason no rename can change, such as DSD's zero-gradient step), and diagnose's predicted verdicts for the fixed
files equal PyTorch's, path by path.

    python3 fix_load_cases.py TORCH_PYTHON OPTSCOPE_CLI CASES_DIR MAKE_LOAD_CASES_PY
"""
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__))))
from compare_verdicts import compare  # noqa: E402  (copied beside this script)

# case -> extra fix arguments; each has something fix must rewrite (names, model keys)
CASES = {
    "compiled": [],  # param_names and the model saved beside carry _orig_mod.
    "ddp": [],  # the same with module.
    "nested_state_ddp": [],  # the same, both nested under a top-level "state" key (optimizer and model found there)
    "compiled_ddp": [],  # torch.compile(DDP(model)): the model saved beside carries _orig_mod.module.
    "flattened_dsd": [],  # DSD flattened format -> nested: optimizer.load_state_dict reads it
    "renamed_layer": [],  # FQN-keyed; fc1 -> fc_in proposed from shapes and positions
    "renamed_layer_ids": ["--rename", "fc1=fc_in"],  # the user names the rename
    "renamed_module_two_groups": [],  # FQN-keyed, decay / no-decay groups: fc1 -> fc_in found as a module
    "lbfgs_renamed_layer": [],  # FQN-keyed LBFGS (no per-parameter shapes): fc1 -> fc_in found by names and positions
}
# what no rename can change: DSD steps a fresh LBFGS without the closure it needs
UNFIXABLE = {("lbfgs_renamed_layer", "set_optimizer_state_dict"), ("lbfgs_renamed_layer",
                                                                   "set_optimizer_state_dict(strict=False)")}


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def main():
    torch_python, cli, cases, maker = sys.argv[1:5]
    work = os.path.abspath("fix_load_cases_out")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    shutil.copy(maker, os.path.join(work, "make_load_cases.py"))
    # fix and diagnose every case first, then PyTorch's verdicts on every fixed file in one run of it (a start of
    # PyTorch costs seconds), then the comparison
    errors_of, diag_of = {}, {}
    for case, extra in CASES.items():
        src = os.path.join(cases, case)
        dst = os.path.join(work, case)
        shutil.copytree(src, dst)
        ref = ["--model", os.path.join(dst, "model.pt"), "--target-optim", os.path.join(dst, "target_optim.pt")]
        fixed = os.path.join(dst, "fixed.pt")
        errors = errors_of[case] = []
        r = run([cli, "fix", os.path.join(dst, "optim.pt"), *ref, "-o", fixed, "--no-fsync", "--json", *extra])
        if r.returncode != 0:
            errors.append(f"fix exited {r.returncode}: {r.stderr.strip()}")
            continue
        # what fix says it did (the fixed copy diagnosed again) must be what diagnose then finds
        after_fix = json.loads(r.stdout)["after_fix"]
        r = run([cli, "diagnose", fixed, *ref, "--json"])
        diag = diag_of[case] = json.loads(r.stdout)
        left = [f for f in diag["findings"] if f["severity"] == "error"]
        errors += [f"after fix: error [{f['code']}] {f['message']}" for f in left]
        if after_fix["no_errors_left"] != (not left):
            errors.append(f"fix said no_errors_left={after_fix['no_errors_left']}, diagnose found {len(left)}")
        if not after_fix["resolved"]:
            errors.append("fix said it resolved nothing")
        still = {c["code"] for c in after_fix["remaining"] + after_fix["added"]}
        found = {f["code"] for f in diag["findings"] if f["severity"] != "info"}
        if still != found:
            errors.append(f"fix said {sorted(still)} remain, diagnose found {sorted(found)}")
    pairs = [a for case in diag_of for a in (case, os.path.join(case, "fixed.pt"))]
    r = run([torch_python, "make_load_cases.py", "verdicts-many", *pairs], cwd=work)
    if r.returncode != 0:
        for case in diag_of:
            errors_of[case].append(f"PyTorch verdicts failed: {r.stderr.strip()[-2000:]}")
    else:
        for case, res in zip(diag_of, json.loads(r.stdout)):
            errors = errors_of[case]
            torch_verdicts = res["verdicts"]
            before = json.load(open(os.path.join(cases, case, "case.json")))["verdicts"]
            for path, want in torch_verdicts.items():
                errors += ["fixed file: " + e for e in compare(path, want, diag_of[case]["verdicts"].get(path, {}))]
                if (before.get(path, {}).get("loads") is False and path != "fsdp1.optim_state_dict_to_load"
                        and (case, path) not in UNFIXABLE):
                    if want.get("loads") is not True:
                        errors.append(f"{path} still fails after fix: {want}")
    passed = failed = 0
    for case, errors in errors_of.items():
        if errors:
            failed += 1
            print(f"FAIL {case}:")
            for e in errors:
                print("    " + e)
        else:
            passed += 1
            print(f"ok   {case}: fixed, diagnoses clean, and PyTorch loads it as predicted")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
