"""Choosing a layout: the space of valid layouts, searching it, the Playbook's rules of thumb and
the best-layout heatmap."""
