"""Defaults of the replicated mode's timings and derived names, in a module without imports: the CLI
reads them to build its help, and every subcommand's parser is built at each start."""

INTERVAL_S = 0.5  # --presence-interval-s: beats sent and member lists read this often (app.dmq.beats)
TIMEOUT_BEATS = 4  # a replica is gone after this many intervals without a beat (2 s by default)
REFRESH_AFTER_S = 24 * 3600.0  # --refresh-after-s (app.dmq.refresh): below the inner topic's 72 h
MAX_REFRESH_AFTER_S = 90 * 24 * 3600.0  # the longest delay the sidecar accepts
PRESENCE_SUFFIX = "_presence"  # the presence topic is the marks topic's name with this


def presence_topic(marks_topic: str) -> str:
    return marks_topic + PRESENCE_SUFFIX
