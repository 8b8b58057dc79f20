# SPDX-License-Identifier: GPL-3.0-or-later
"""diagnose's prediction of each PyTorch load path against what real PyTorch 2.6 did (tests/data/load_cases, made by
tests/fixtures/make_load_cases.py), case by case and path by path: loads or not, the exception type and its exact
text (the model's class name written <Model>), how many parameters get state, and whether the first step() works.

    python3 compare_verdicts.py OPTSCOPE_CLI CASES_DIR
"""
import json
import os
import re
import subprocess
import sys


def exc_type(step):
    return "ok" if step in (None, "ok") else step.split(":", 1)[0]


def compare(path, want, got):
    if "skipped" in want:
        return [] if "skipped" in got else [f"{path}: PyTorch skipped ({want['skipped']}), diagnose says {got}"]
    if "skipped" in got:
        return [f"{path}: diagnose skipped ({got['skipped']}), PyTorch: {want}"]
    if not want["loads"] and got.get("loads") and "if_trainable" in got:
        # diagnose said both: loads if the parameters it names are frozen, raises if one is trainable (the files
        # cannot tell), naming the first that is; PyTorch's target trained one, so the second is the prediction
        named = [n for n in got["assumes_frozen"] if f"'{n}'" in want["message"] or f"'state.{n}." in want["message"]]
        got = dict(got, loads=False, **got["if_trainable"])
        if named:  # the same message for the one PyTorch met first (a flattened key keeps its state name)
            got["message"] = got["message"].replace(f"'{got['assumes_frozen'][0]}'", f"'{named[0]}'").replace(
                f"'state.{got['assumes_frozen'][0]}.", f"'state.{named[0]}.")
    if want["loads"] != got["loads"]:
        return [f"{path}: PyTorch {'loads' if want['loads'] else 'raises ' + want['exception'] + ': ' + want['message']}"
                f", diagnose {'loads' if got['loads'] else 'raises ' + got['exception'] + ': ' + got['message']}"]
    errors = []
    if not want["loads"]:
        message = re.sub(r"Error\(s\) in loading state_dict for \w+:", "Error(s) in loading state_dict for <Model>:",
                         want["message"])
        if (want["exception"], message) != (got["exception"], got["message"]):
            errors.append(f"{path}: PyTorch raises {want['exception']}: {message!r}, "
                          f"diagnose predicts {got['exception']}: {got['message']!r}")
        return errors
    for k in ("params_with_state", "params_total"):
        if k in want and k in got and want[k] != got[k]:
            errors.append(f"{path}: {k} {want[k]} (PyTorch) != {got[k]} (diagnose)")
    if "step_after_load" in want and exc_type(want["step_after_load"]) != exc_type(got.get("step_after_load")):
        errors.append(f"{path}: first step() after loading: PyTorch {want['step_after_load']!r}, "
                      f"diagnose {got.get('step_after_load')!r}")
    return errors


def main():
    cli, cases = sys.argv[1], sys.argv[2]
    passed = failed = 0
    for case in sorted(os.listdir(cases)):
        d = os.path.join(cases, case)
        if not os.path.isfile(os.path.join(d, "case.json")):
            continue
        spec = json.load(open(os.path.join(d, "case.json")))
        r = subprocess.run([cli, "diagnose", os.path.join(d, "optim.pt"), "--model", os.path.join(d, "model.pt"),
                            "--target-optim", os.path.join(d, "target_optim.pt"), "--json"],
                           capture_output=True, text=True)
        if r.returncode not in (0, 1):
            print(f"FAIL {case}: exit {r.returncode}: {r.stderr.strip()}")
            failed += 1
            continue
        got = json.loads(r.stdout)["verdicts"]
        errors = []
        for path, want in spec["verdicts"].items():
            if path not in got:
                errors.append(f"{path}: no prediction")
                continue
            errors += compare(path, want, got[path])
        if errors:
            failed += 1
            print(f"FAIL {case}:")
            for e in errors:
                print("    " + e)
        else:
            passed += 1
            print(f"ok   {case}")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
