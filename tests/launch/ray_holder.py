"""A stand-in for a training job, for the launcher's teardown tests: on the launcher's private Ray head it starts
an actor that itself starts a child process (like a vLLM engine's EngineCore), prints the pids, then waits."""

import os
import subprocess
import sys
import time

import ray


@ray.remote(num_cpus=0)
class Holder:
    def start_child(self) -> tuple:
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
        self.child = child  # keep a reference: the child lives as long as the actor
        return os.getpid(), child.pid


if __name__ == "__main__":
    ray.init(address=os.environ["RAY_ADDRESS"])
    holder = Holder.remote()
    actor_pid, child_pid = ray.get(holder.start_child.remote())
    print(f"HOLDER ready driver={os.getpid()} actor={actor_pid} child={child_pid}", flush=True)
    while True:
        time.sleep(1)
