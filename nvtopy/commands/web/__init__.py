"""``nvtopy web``: the monitor in a browser, read-only, behind a token (:mod:`.command`, :mod:`.server`)."""
