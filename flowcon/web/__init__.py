"""What the agent and the allocator serve over HTTP besides their APIs: health
(``health``), bounded in-memory history for the live view (``history``), the static page
files and their server helpers (``static``), and the container healthcheck probe (``probe``).
"""
