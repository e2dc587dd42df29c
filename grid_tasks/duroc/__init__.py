"""DUROC coallocation: the coordination store (:mod:`grid_tasks.duroc.store`) and, on top
of it, the control side (chords of GRAM submits, barrier release, cancel)."""
