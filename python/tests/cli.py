"""Runs the fulcrum CLI with --format json and parses the answer."""

import json
import subprocess


def run(cli, *args, plugin=None):
    """(exit code, parsed stdout or None, stderr)."""
    cmd = [str(cli), *map(str, args), "--format", "json"]
    if plugin is not None:
        cmd += ["--plugin", str(plugin)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    return done.returncode, (json.loads(done.stdout) if done.returncode == 0 else None), \
        done.stderr.strip()


def run_json(cli, *args, plugin=None):
    code, answer, stderr = run(cli, *args, plugin=plugin)
    assert code == 0, f"fulcrum {' '.join(map(str, args))} failed: {stderr}"
    return answer
