"""Stop strings over a token stream: release text as soon as it cannot be the start of a stop string."""

from __future__ import annotations


class StopMatcher:
    def __init__(self, stops: list[str]):
        self.stops = [s for s in stops if s]
        self.firsts = {s[0] for s in self.stops}  # text without any of these cannot start a stop string
        self.held = ""
        self.matched: str | None = None

    def feed(self, text: str) -> str:
        """Add generated text; return the part that is safe to emit. After a match, `matched` is set."""
        self.held += text
        if not self.stops or not any(c in self.held for c in self.firsts):  # the common case, per token
            out, self.held = self.held, ""
            return out
        hits = [(self.held.find(s), s) for s in self.stops if s in self.held]
        if hits:
            index, stop = min(hits)
            self.matched = stop
            out, self.held = self.held[:index], ""
            return out
        keep = 0
        for stop in self.stops:  # longest suffix of `held` that is a prefix of some stop string
            for n in range(min(len(stop) - 1, len(self.held)), 0, -1):
                if self.held.endswith(stop[:n]):
                    keep = max(keep, n)
                    break
        out, self.held = self.held[: len(self.held) - keep], self.held[len(self.held) - keep:]
        return out

    def flush(self) -> str:
        out, self.held = self.held, ""
        return out
