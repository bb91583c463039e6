"""bench/gpu_memtrace.py: the allocations live at the peak of an allocator trace, grouped by the code that made them."""

from bench import gpu_memtrace


def test_the_peak_and_what_is_live_then():
    frames = {"a": [{"filename": "/x/a.py", "line": 1, "name": "f"}], "b": [{"filename": "/x/b.py", "line": 2, "name": "g"}]}
    trace = [{"action": "alloc", "addr": 1, "size": 100, "frames": frames["a"]},
             {"action": "alloc", "addr": 2, "size": 50, "frames": frames["b"]},  # the peak: 150 bytes
             {"action": "free_requested", "addr": 2, "size": 50},
             {"action": "alloc", "addr": 3, "size": 30, "frames": frames["b"]}]
    peak, live = gpu_memtrace.live_at_peak(trace)
    assert peak == 150 and sorted(live) == [1, 2]
    lines = gpu_memtrace.grouped(live)
    assert len(lines) == 2 and "a.py:1:f" in lines[0] and "b.py:2:g" in lines[1]
