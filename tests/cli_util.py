import atexit
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The command lines the tests start share a compile cache of this test process (removed at its exit), as a user's
# runs on one machine do: a subprocess compiles only what no earlier one compiled (the tiny models' graphs
# otherwise took most of each run). The tests of the cache itself pass their own folders; in-process tests keep
# it off (tests/conftest.py).
_COMPILE_CACHE = tempfile.mkdtemp(prefix="ms_ocr_test_compile_")
atexit.register(shutil.rmtree, _COMPILE_CACHE, True)


def _base_env():
    return dict(os.environ, PYTHONPATH=ROOT, GLOG_v="3", MS_OCR_OFFLINE="1", MS_OCR_COMPILE_CACHE="1",
                MS_OCR_COMPILE_CACHE_DIR=_COMPILE_CACHE)


def run_module(module, *args, env=None, timeout=600, cwd=ROOT):
    """`python -m module args` in a new process: subprocess.CompletedProcess with its exit code and text output.
    The process is forked from a server that has imported MindSpore already (_ForkServer), unless
    MS_OCR_TEST_FORK=0 or `env` changes anything MindSpore may read as it loads."""
    e = _base_env()
    e.update(env or {})
    if _ForkServer.usable(e):
        return _ForkServer.get().run(module, args, e, timeout, cwd)
    return subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True, env=e,
                          timeout=timeout, cwd=cwd)


# The fork server's program. It imports what every command line of ms_ocr imports first (MindSpore: ~2.7 s of
# each process's start on a 2-core Xeon) and nothing of ms_ocr, then forks one child per request. The child is
# what `python -m module args` would be from there: its own environment, working directory, argv and sys.path[0],
# stdout and stderr into files, stdin from /dev/null, exit code from SystemExit (a traceback and 1 for an
# exception), atexit handlers run. The server waits for the child and sends back its wait status.
_SERVER = r"""
import atexit, json, os, runpy, sys, traceback
import numpy, PIL.Image, mindspore
pipe_in, pipe_out = os.fdopen(os.dup(0), "r"), os.fdopen(os.dup(1), "w")
null = os.open(os.devnull, os.O_RDWR)
os.dup2(null, 0)
os.dup2(2, 1)
pipe_out.write('"ready"\n')
pipe_out.flush()
for line in pipe_in:
    req = json.loads(line)
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        pipe_in.close()
        pipe_out.close()
        out, err = os.open(req["out"], os.O_WRONLY), os.open(req["err"], os.O_WRONLY)
        os.dup2(out, 1)
        os.dup2(err, 2)
        os.close(out)
        os.close(err)
        os.close(null)
        code = 1
        try:
            os.chdir(req["cwd"])
            os.environ.clear()
            os.environ.update(req["env"])
            sys.argv = ["-m", *req["args"]]
            sys.path[0] = os.getcwd()
            runpy.run_module(req["module"], run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as e:
            if e.code is None or isinstance(e.code, int):
                code = e.code or 0
            else:
                print(e.code, file=sys.stderr)
        except BaseException:
            traceback.print_exc()
        try:
            atexit._run_exitfuncs()
        finally:
            try:
                sys.stdout.flush()
                sys.stderr.flush()
            finally:
                os._exit(code & 0xFF)
    pipe_out.write(json.dumps({"pid": pid}) + "\n")
    pipe_out.flush()
    _, status = os.waitpid(pid, 0)
    pipe_out.write(json.dumps({"status": status}) + "\n")
    pipe_out.flush()
"""


class _ForkServer:
    """One fork server per test process, started at its first command line and stopped at its exit."""

    instance = None
    lock = threading.Lock()
    # what a child may set differently from the server: read by ms_ocr (imported in the child) or by pytest, not by
    # MindSpore or its libraries as they load
    CHILD_KEYS = ("MS_OCR_", "RANK_ID", "RANK_SIZE", "HOME", "PYTEST_")

    @classmethod
    def usable(cls, env):
        if os.environ.get("MS_OCR_TEST_FORK", "1") == "0" or not hasattr(os, "fork") or cls.lock.locked():
            return False  # (a second thread's command line while one runs: its own process)
        return cls._loads_alike(env, _base_env())

    @classmethod
    def _loads_alike(cls, env, base):
        differ = (set(env) ^ set(base)) | {k for k in set(env) & set(base) if env[k] != base[k]}
        return all(key.startswith(cls.CHILD_KEYS) for key in differ)

    @classmethod
    def get(cls):
        """The running server, started again when it has stopped or when this process's own environment has
        changed since it started (torch sets TORCHINDUCTOR_CACHE_DIR in os.environ the first time it needs it)."""
        if cls.instance is not None and (cls.instance.proc.poll() is not None or
                                         not cls._loads_alike(cls.instance.env, _base_env())):
            cls.instance.stop()
            cls.instance = None
        if cls.instance is None:
            cls.instance = cls()
        return cls.instance

    def __init__(self):
        self.env = _base_env()
        self.proc = subprocess.Popen([sys.executable, "-c", _SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     env=self.env, cwd=ROOT, bufsize=0)
        self.buf = b""
        atexit.register(self.stop)
        if self._reply() != "ready":
            raise RuntimeError(f"the fork server did not start (exit {self.proc.wait()})")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait(timeout=30)

    def _reply(self, deadline=None):
        """The server's next line as JSON; None if `deadline` (time.monotonic) passes first. Read from the pipe
        itself, not a buffered file object, so a line already read ahead is never waited for."""
        import select
        fd = self.proc.stdout.fileno()
        while b"\n" not in self.buf:
            wait = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not select.select([fd], [], [], wait)[0]:
                return None
            chunk = os.read(fd, 65536)
            if not chunk:
                raise RuntimeError(f"the fork server stopped (exit {self.proc.wait()})")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line)

    def run(self, module, args, env, timeout, cwd):
        with self.lock, tempfile.TemporaryDirectory(prefix="ms_ocr_test_run_") as tmp:
            out, err = os.path.join(tmp, "out"), os.path.join(tmp, "err")
            open(out, "w").close()
            open(err, "w").close()
            request = {"module": module, "args": [str(a) for a in args], "env": env, "cwd": str(cwd), "out": out,
                       "err": err}
            data = (json.dumps(request) + "\n").encode()
            while data:
                data = data[self.proc.stdin.write(data):]
            pid = self._reply()["pid"]
            reply = self._reply(time.monotonic() + timeout if timeout else None)
            cmd = [sys.executable, "-m", module, *args]
            if reply is None:  # as subprocess.run: the child killed, TimeoutExpired raised
                os.kill(pid, signal.SIGKILL)
                self._reply()
                raise subprocess.TimeoutExpired(cmd, timeout, _read(out), _read(err))
            status = reply["status"]
            code = os.waitstatus_to_exitcode(status)
            return subprocess.CompletedProcess(cmd, code, _read(out), _read(err))


def _read(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read()


def assert_one_line_error(proc, *needles):
    assert proc.returncode != 0, proc.stdout
    err = proc.stderr.strip()
    assert "Traceback" not in err, err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    for n in needles:
        assert n in lines[0], lines[0]
