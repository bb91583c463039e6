"""The degeneration stress set and its scores, for `bench.degeneration_bench` and the tests (not shipped in nbutils).

- `corpus`: healthy documents from text on the machine, each in the tuning half or the reported half.
- `stress`: healthy samples and degenerate ones of every class, cut at eight offsets.
- `scorecard`: recall per class and per cut, false positives per group, and the guard streamed token by token.
"""
