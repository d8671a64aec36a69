"""pip's resolver on the pinned GPU set (``tests/launch/test_install_gpu.py``), started when the session starts.

It waits on the network for about two minutes and barely uses the CPU, so ``tests/conftest.py`` starts it as soon as
collection picks the test, and it runs while the CPU-bound tests do; the test then takes its result."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

TEST_NAME = "test_pips_resolver_accepts_the_pinned_gpu_set"
LIMIT_S = 540.0


@dataclass
class Resolver:
    proc: subprocess.Popen
    folder: Path
    started: float

    @property
    def report(self) -> Path:
        return self.folder / "report.json"

    def wait(self) -> tuple[int | None, str]:
        """(pip's exit code, its stderr); None where it ran past LIMIT_S from its start (then it is killed)."""
        try:
            code = self.proc.wait(timeout=max(1.0, LIMIT_S - (time.time() - self.started)))
        except subprocess.TimeoutExpired:
            self.stop()
            code = None
        return code, (self.folder / "stderr.txt").read_text()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.folder, ignore_errors=True)


def start() -> Resolver:
    """``pip install --dry-run --report`` of the pinned set against the public index (no local wheel folder, no pip
    config: that one holds the CPU torch), in the background."""
    from mrtpo_openrlhf.cli.doctor import PINS

    folder = Path(tempfile.mkdtemp(prefix="pip-resolver-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1")
    pins = [f"vllm=={PINS['vllm']}", f"torch=={PINS['torch']}", f"deepspeed=={PINS['deepspeed']}"]
    pins += ["transformers==5.15.0", "ray[default]==2.55.0"]
    command = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "-q"]
    command += ["--report", str(folder / "report.json"), *pins]
    with open(folder / "stderr.txt", "w") as err:
        proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=err)
    return Resolver(proc, folder, time.time())
