"""What a user waits for and what a process holds, read from /proc (Linux): the process's age (launch to now)
and its resident memory now and at its peak. Elsewhere these are None."""


import os
import time


def _status(key):
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def rss_gb():
    """Resident memory now (VmRSS), GB (2**30 bytes)."""
    value = _status("VmRSS")
    return None if value is None else round(value / 2 ** 30, 3)


def peak_rss_gb():
    """Peak resident memory so far (VmHWM), GB."""
    value = _status("VmHWM")
    return None if value is None else round(value / 2 ** 30, 3)


def process_age_ms():
    """Milliseconds since this process was launched (its start time in /proc/self/stat, in clock ticks since
    boot, against CLOCK_BOOTTIME; 10 ms resolution), or None."""
    try:
        with open("/proc/self/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        start_s = int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22 of proc(5), counted after the name
        now_s = time.clock_gettime(time.CLOCK_BOOTTIME)
    except (OSError, ValueError, IndexError, AttributeError):
        return None
    return round(1000 * (now_s - start_s), 1)


def available_bytes():
    """Memory the kernel could give this process without swapping (MemAvailable), bytes; None when unknown."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None
