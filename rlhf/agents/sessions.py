"""Sessions of the OpenAI-compatible server: delta tokenisation across turns and stitching calls into one Rollout.

A session is one episode's conversation. Its first chat call is rendered with the chat template and tokenised
whole. Every later call must render to text that *extends* the session's text so far (previous prompt + the
completion exactly as generated); only the new suffix (the assistant turn's closing tokens, tool results, the next
user turn, the generation prompt) is tokenised and appended to the session's token buffer. The tokens a completion
generated are thus kept as generated, never re-encoded from text, so the stitched trajectory is exactly what the
policy sampled plus the environment's tokens.

For this the agent must send earlier messages unchanged and pass each assistant reply back verbatim (the server
returns the content with special tokens kept, minus the final stop token, which the template adds back). A chat
template that rewrites history (e.g. one that drops earlier reasoning) breaks the prefix: the call fails with a
:class:`PrefixError` that shows where the texts diverge.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from rlhf.backends.contract.rollout import Rollout


class PrefixError(ValueError):
    """A session's new prompt does not extend its previous prompt + completion."""


class SessionError(KeyError):
    """An unknown or busy session."""


@dataclass
class CallTrace:
    """One chat call as the policy saw it."""

    prompt_ids: list[int]  # the whole session so far, as tokens
    completion_ids: list[int]
    logprobs: list[float]
    finish_reason: str


@dataclass
class Session:
    session_id: str
    text: str = ""  # the session's text so far: last prompt + last completion as generated
    ids: list[int] = field(default_factory=list)
    traces: list[CallTrace] = field(default_factory=list)
    truncated: bool = False  # a call was refused because the length budget was spent
    busy: bool = False

    def prompt_ids(self, rendered: str, encode: Callable[[str], list[int]]) -> list[int]:
        """Tokens of ``rendered``: the buffer plus the tokens of the new suffix (all of it on the first call)."""
        if not self.traces:
            return encode(rendered)
        if not rendered.startswith(self.text):
            pairs = enumerate(zip(self.text, rendered, strict=False))
            k = next((i for i, (a, b) in pairs if a != b), min(len(self.text), len(rendered)))
            raise PrefixError(
                f"session {self.session_id}: the conversation rendered by the chat template does not extend the "
                f"previous call's prompt + completion (they differ at character {k}: before {self.text[k : k + 40]!r}, "
                f"now {rendered[k : k + 40]!r}). Send earlier messages unchanged, pass the assistant reply back "
                "verbatim, and use a new session for a different conversation"
            )
        return self.ids + encode(rendered[len(self.text) :])

    def record(self, prompt_text: str, trace: CallTrace, completion_text: str) -> None:
        self.traces.append(trace)
        self.ids = trace.prompt_ids + trace.completion_ids
        self.text = prompt_text + completion_text


class SessionStore:
    """Sessions by id; opened and closed by the executor's thread, used by the server's."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sessions: dict[str, Session] = {}

    def open(self, session_id: str) -> Session:
        with self._lock:
            if session_id in self._sessions:
                raise SessionError(f"session {session_id} is already open")
            session = self._sessions[session_id] = Session(session_id)
            return session

    def get(self, session_id: str) -> Session:
        with self._lock:
            try:
                return self._sessions[session_id]
            except KeyError:
                raise SessionError(
                    f"unknown session_id {session_id!r}: sessions are opened by the agent executor; use the id "
                    "it gave run_agent"
                ) from None

    def close(self, session_id: str) -> Session | None:
        with self._lock:
            return self._sessions.pop(session_id, None)

    def __len__(self) -> int:
        with self._lock:
            return len(self._sessions)


def stitch(session: Session) -> Rollout:
    """The session's calls as ONE Rollout: the first call's prompt, then every completion (action_mask 1, its
    log-probs) with the template/user/tool tokens between calls (action_mask 0, log-prob 0.0)."""
    traces = session.traces
    if not traces:
        raise ValueError(f"session {session.session_id}: run_agent made no chat call with this session")
    for i in range(1, len(traces)):
        before = traces[i - 1].prompt_ids + traces[i - 1].completion_ids
        if traces[i].prompt_ids[: len(before)] != before:  # delta tokenisation guarantees this; cheap to check
            raise PrefixError(f"session {session.session_id}: call {i} does not extend call {i - 1}")
    prompt = traces[0].prompt_ids
    last = traces[-1]
    full = last.prompt_ids + last.completion_ids
    mask = [0] * len(full)
    logprobs = [0.0] * len(full)
    for t in traces:
        start = len(t.prompt_ids)
        mask[start : start + len(t.completion_ids)] = [1] * len(t.completion_ids)
        logprobs[start : start + len(t.logprobs)] = t.logprobs
    n = len(prompt)
    return Rollout(
        prompt_ids=list(prompt),
        output_ids=full[n:],
        action_mask=mask[n:],
        logprobs=logprobs[n:],
        finish_reason="length" if session.truncated or last.finish_reason == "length" else "stop",
        extra={"turns": len(traces), "session_id": session.session_id},
    )
