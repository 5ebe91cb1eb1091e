"""`make soak` (bench/soak.py): each live path at twice the engine's rate for SOAK_S
seconds, sampled every 10 s. common: the feed, the sampler, the record of frames and
the checks; plots: the PNGs; one module per live path (cli, gst, python, ros2)."""
