"""What makes an output folder's results one job, and who may write into it.

A resumable run skips the pages its folder already holds. That is right only for the same job: the same tool,
model, checkpoint, prompt or task and generation settings. The first run records that identity in OUT/job.json;
a later run with another identity is refused with the settings that differ (like `wget -c`, `rsync` and
`make` only continue the same work) unless it is told to --overwrite. Execution choices that do not change the
text (batch size, threads, device, progress, dumps) are not part of a job.

An advisory lock (flock, released by the kernel when the process ends, even by SIGKILL) keeps two runs from
working on the same folder at once."""

import errno
import fcntl
import hashlib
import json
import os

from ms_ocr.errors import UsageError

JOB_FILE = "job.json"
LOCK_FILE = ".lock"
_SMALL = 1 << 20  # checkpoint files up to this size are hashed whole, larger ones by size and their ends
_ENDS = 1 << 16


class JobError(UsageError):
    """An output folder that this run may not use as asked (another job's results, another run's lock)."""


def checkpoint_fingerprint(folder):
    """A short hash of a checkpoint folder's files: names, sizes, the small files' bytes and the first and last
    64 KiB of the large ones (weights). Moving or copying a checkpoint keeps it; re-converting or swapping
    weights changes it. Costs milliseconds, not a read of the weights. Hidden files and folders are left out
    (huggingface-cli keeps download timestamps in .cache/)."""
    h = hashlib.sha1()
    for root, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(f for f in files if not f.startswith(".")):
            path = os.path.join(root, name)
            size = os.path.getsize(path)
            h.update(f"{os.path.relpath(path, folder)}\0{size}\0".encode("utf-8", "surrogateescape"))
            with open(path, "rb") as f:
                if size <= _SMALL:
                    h.update(f.read())
                else:
                    h.update(f.read(_ENDS))
                    f.seek(size - _ENDS)
                    h.update(f.read(_ENDS))
    return h.hexdigest()[:16]


def precision_identity(args):
    """The precision options that change a page's text, for a job's identity: --dtype bf16/fp16, --quantize and
    --kv-cache-dtype when not their exact defaults (left out at the defaults, so the folders of runs made before
    they were part of a job stay that job's)."""
    out = {}
    if args.dtype in ("bf16", "fp16"):
        out["dtype"] = args.dtype
    if args.quantize != "none":
        out["quantize"] = args.quantize
    if args.kv_cache_dtype != "auto":
        out["kv_cache_dtype"] = args.kv_cache_dtype
    return out


def job_id(identity):
    """A short hash of an identity: every batch record carries it, so a page counts as done only for its job."""
    return hashlib.sha1(json.dumps(identity, sort_keys=True).encode("utf-8", "surrogateescape")).hexdigest()[:12]


def _show(value):
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 60 else text[:57] + "...\""


def differences(old, new):
    """'name: old -> new' for every setting in which two identities differ."""
    out = []
    for key in list(new) + [k for k in old if k not in new]:
        if old.get(key) != new.get(key):
            out.append(f"{key} {_show(old.get(key))} -> {_show(new.get(key))}")
    return out


def read_job(out):
    """The identity recorded in `out`, or None when the folder has none."""
    path = os.path.join(out, JOB_FILE)
    try:
        with open(path, encoding="utf-8") as f:
            record = json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise JobError(f"{path} is unreadable ({e}); remove it, or use another --out") from None
    if not isinstance(record, dict) or not isinstance(record.get("identity"), dict):
        raise JobError(f"{path} is not a job record; remove it, or use another --out")
    return record["identity"]


def write_job(out, identity, info=None):
    """Record the job's identity (atomically: ranks starting together write the same file)."""
    path = os.path.join(out, JOB_FILE)
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump({"identity": identity, **(info or {})}, f, ensure_ascii=True, indent=1)
        f.write("\n")
    os.replace(tmp, path)


def check_job(out, identity, overwrite, has_results):
    """Make `out` this job's folder. Returns "new", "same", "adopted" (results written before job records
    existed: taken as this job's) or "overwrite" (the caller removes the old results); raises JobError for
    another job's folder without --overwrite."""
    old = read_job(out)
    if old == identity:
        return "same"
    if old is None:
        return "adopted" if has_results else "new"
    if overwrite:
        return "overwrite"
    raise JobError(f"{out} holds the results of another job ({'; '.join(differences(old, identity))}); use "
                   "another --out, or --overwrite to replace them")


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # another user's process
    return True


class FolderLock:
    """flock on OUT/.lock: exclusive for a whole job, shared for one of several ranks (each rank also holds its
    own shard lock exclusively). A second run is refused at once, never made to wait."""

    def __init__(self, out, shard=None):
        self.out, self.shard, self._files = out, shard, []

    def _take(self, name, mode):
        path = os.path.join(self.out, name)
        f = open(path, "a+", encoding="utf-8")
        try:
            fcntl.flock(f.fileno(), mode | fcntl.LOCK_NB)
        except OSError as e:
            f.seek(0)
            holder = f.read().strip()
            f.close()
            if e.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                raise
            who = f" (pid {holder})" if holder.isdigit() and _alive(int(holder)) else ""
            raise JobError(f"{self.out} is in use by another run{who}; wait for it to finish, or use another "
                           "--out") from None
        if mode == fcntl.LOCK_EX:
            f.seek(0)
            f.truncate()
            f.write(str(os.getpid()))
            f.flush()
        self._files.append(f)

    def __enter__(self):
        os.makedirs(self.out, exist_ok=True)
        try:
            if self.shard is None:
                self._take(LOCK_FILE, fcntl.LOCK_EX)
            else:
                self._take(LOCK_FILE, fcntl.LOCK_SH)
                self._take(f"{LOCK_FILE}-{self.shard}", fcntl.LOCK_EX)
        except BaseException:
            self.release()
            raise
        return self

    def release(self):
        for f in reversed(self._files):
            f.close()  # closing the descriptor drops the flock
        self._files = []

    def __exit__(self, *exc):
        self.release()
