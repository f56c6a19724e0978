"""Dashboard panels: each renders one part of a Snapshot and repaints only what changed."""
