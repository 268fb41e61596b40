"""Sampling: the request geometry and packed layout, the sigma schedules, audio-driven
schedules, and the denoising loop (``denoise``) with its hooks, progress and cancel."""
