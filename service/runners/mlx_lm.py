"""The mlx-lm text runner: one thread per loaded model, continuous batching on mlx-lm's `BatchGenerator`.

The thread owns every MLX object of its model (MLX streams belong to the thread that made them) and loops:
take new jobs, admit them while the batch has room (template, tokenize, look up the prefix cache, insert),
drop jobs whose client left or whose deadline passed, run one step, hand each job its text. A newcomer joins
at the next step; `BatchGenerator` interleaves its prefill with the running streams' decode steps one chunk at
a time, so nobody stalls for longer than one prefill chunk. A model's thread never waits for another model's.

Stop strings are matched on text (`engine.stops`), per job; end-of-sequence is matched on tokens by the batch.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import threading
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any

import anyio
import mlx.core as mx
import mlx_lm
from mlx.utils import tree_flatten
from mlx_lm.generate import BatchGenerator, StopSequences, generate_step
from mlx_lm.models.cache import LRUPromptCache, can_trim_prompt_cache, make_prompt_cache, trim_prompt_cache
from mlx_lm.sample_utils import greedy_sampler, make_logits_processors

from ..engine.events import Done, FinishReason, Timings, ToolCall, Usage
from ..engine.job import Job
from ..engine.stops import StopMatcher
from ..errors import BadRequest, GenerationTimeout, LoadFailed, ServiceError
from .base import LoadSpec
from .channel import Channel
from .disk_cache import DiskPromptCache
from .guidance import Guide
from .sampling import banning, sampler_for
from .worker import settle

log = logging.getLogger("mlx_service.runner")


async def open_runner(spec: LoadSpec) -> MlxLmRunner:
    """Load `spec` on a new runner thread; raises what loading raised, with the memory it took freed."""
    runner = MlxLmRunner(spec)
    await runner._loaded
    return runner


@dataclass
class _Live:
    """A job inside the runner, from submission to its last event."""

    job: Job
    channel: Channel
    submitted: float = field(default_factory=time.perf_counter)
    admitted: float = 0.0
    first: float = 0.0
    uid: int = -1
    tokens: list[int] = field(default_factory=list)  # the prompt
    cached: int = 0  # prompt tokens that came from the prefix cache
    fed: int = 0  # prompt tokens in its cache while it prefills alone
    out: list[int] = field(default_factory=list)  # generated tokens
    cache: Any = None  # its KV cache while it is not in the batch (waiting to be inserted, or solo)
    steps: Any = None  # the solo job's generate_step iterator
    sampler: Any = None
    processors: list = field(default_factory=list)
    detokenizer: Any = None
    matcher: StopMatcher | None = None
    output: Any = None  # the job's OutputSplitter: answer, reasoning and tool calls
    stop_sequence: str | None = None  # which of the request's stop strings ended it
    sent_text: bool = False


class MlxLmRunner:
    def __init__(self, spec: LoadSpec):
        self.name = spec.name
        self.capacity = max(1, spec.batch_size)
        self.memory_bytes = 0
        self._spec = spec
        loop = asyncio.get_running_loop()
        self._loop = loop
        self._loaded: asyncio.Future = loop.create_future()
        self._closed: asyncio.Future = loop.create_future()
        self._lock = threading.Condition()
        self._tokenizing = threading.Lock()
        self._inbox: deque[_Live] = deque()
        self._closing = False
        self._clear = False  # clear_cache() was asked: the RAM tier is emptied on the runner's thread
        self._counts: Counter = Counter()
        self._running = self._waiting = 0
        self._ttft = 0.0  # recent time to first token (moving average): how long a missed burst waits
        self.model = self.tokenizer = self.prompt_cache = self.disk_cache = None
        self._thread = threading.Thread(target=self._main, name=f"runner {spec.name}", daemon=True)
        self._thread.start()

    # ---- event loop side ----------------------------------------------------------------------------------
    async def submit(self, job: Job):
        channel = Channel(asyncio.get_running_loop())
        with self._lock:
            if self._closing:
                raise LoadFailed(f"{self.name} is being unloaded: send the request again to load it anew")
            self._inbox.append(_Live(job, channel))
            self._lock.notify()
        try:
            while events := await channel.get():
                for event in events:
                    yield event
        finally:
            if not channel.finished:  # the reader left early: stop the job, and wait until the runner has
                job.cancel.set()
                with anyio.CancelScope(shield=True):
                    await channel.wait_finished()

    async def count_tokens(self, job: Job) -> int:
        return len(await asyncio.to_thread(self._prompt_tokens, job))

    def stats(self) -> dict[str, int]:
        disk = {**self.disk_cache.counts, "disk_bytes": self.disk_cache.bytes} if self.disk_cache else {}
        return {"running": self._running, "waiting": self._waiting, **self._counts, **disk}

    def clear_cache(self) -> str | None:
        """Forget every cached prefix, in RAM (on the runner's thread, at its next step) and on disk; returns
        the disk tier's key, whose files are this runner's."""
        with self._lock:
            self._clear = True
            self._lock.notify()
        if self.disk_cache is not None:
            self.disk_cache.clear()
            return self.disk_cache.key
        return None

    async def close(self) -> None:
        with self._lock:
            self._closing = True
            self._lock.notify()
        await asyncio.shield(self._closed)

    # ---- runner thread ------------------------------------------------------------------------------------
    def _main(self) -> None:
        stream = mx.new_stream(mx.default_device())
        try:
            with mx.stream(stream):
                self._load()
        except BaseException as exc:
            self.model = self.tokenizer = self.prompt_cache = None
            _free()
            self._settle(self._loaded, exc)
            self._settle(self._closed, None)
            return
        self._settle(self._loaded, None)
        try:
            self._serve(stream)
        except BaseException:  # a bug, not a request's fault: fail what is in flight, free the model
            log.exception("runner %s stopped", self.name)
        finally:
            with self._lock:
                self._closing = True
                stranded = list(self._inbox)
                self._inbox.clear()
            for live in stranded:
                live.channel.fail(LoadFailed(f"{self.name} was unloaded before this request ran"))
            mx.synchronize(stream)  # steps run one ahead: let the last one finish before its thread ends
            if self.disk_cache is not None:
                self.disk_cache.close()  # queued writes finish first
            self.model = self.tokenizer = self.prompt_cache = None
            _free()
            self._settle(self._closed, None)

    def _settle(self, future: asyncio.Future, error: BaseException | None) -> None:
        self._loop.call_soon_threadsafe(settle, future, None, error)

    def _load(self) -> None:
        spec = self._spec
        self.model, self.tokenizer = mlx_lm.load(str(spec.path),
                                                 tokenizer_config={"trust_remote_code": spec.trust_remote_code})
        mx.eval(self.model.parameters())
        self.memory_bytes = sum(v.nbytes for _, v in tree_flatten(self.model.parameters()))
        if not all(hasattr(c, "merge") for c in make_prompt_cache(self.model)):
            raise ValueError("this architecture's KV cache cannot be batched by mlx-lm (no `merge`), "
                             "so this runner cannot serve it yet")
        if spec.chat_template and (spec.override_template or not getattr(self.tokenizer, "chat_template", None)):
            self.tokenizer.chat_template = spec.chat_template
        self.prompt_cache = (LRUPromptCache(max_size=spec.cache_entries, max_bytes=spec.cache_bytes)
                             if spec.cache_entries > 0 else None)
        self.disk_cache = (DiskPromptCache(spec.disk_cache_dir, _model_key(spec), spec.disk_cache_bytes)
                           if spec.disk_cache_dir is not None and self.prompt_cache is not None else None)
        self._eos = list(self.tokenizer.eos_token_ids)
        self._guide = Guide(self.tokenizer, self._eos)
        self._greedy, self._greedy_banning = greedy_sampler, banning(self._eos, greedy_sampler)

    def _serve(self, stream) -> None:
        self._stream = stream  # generate_step (solo jobs) runs on it too
        batch = self._new_batch(stream)
        self._stops = {False: StopSequences([(t,) for t in self._eos]), True: StopSequences()}  # by ignore_eos
        fresh = make_prompt_cache(self.model)  # a solo job must be able to move into the batch, cache and all:
        solo_ok = can_trim_prompt_cache(fresh) and all(hasattr(c, "offset") for c in fresh)
        running: dict[int, _Live] = {}
        waiting: deque[_Live] = deque()
        solo: _Live | None = None  # a job decoding alone, on mlx-lm's generate_step: no batch bookkeeping
        try:
            with mx.stream(stream):
                while True:
                    if self._inbox or self._closing or self._clear or not (running or solo):  # safe to peek at
                        with self._lock:
                            idle = not (running or waiting or solo)
                            while not (self._inbox or running or waiting or solo or self._closing or self._clear):
                                self._lock.wait()
                            if idle:
                                self._gather()
                            waiting.extend(self._inbox)
                            self._inbox.clear()
                            if self._clear and self.prompt_cache is not None:
                                self.prompt_cache = LRUPromptCache(max_size=self._spec.cache_entries,
                                                                   max_bytes=self._spec.cache_bytes)
                            self._clear = False
                            if self._closing and not (running or waiting or solo):
                                return
                    solo = self._expire(waiting, batch, running, solo)
                    if solo is not None and waiting:  # company: the solo job continues in the batch
                        running[self._to_batch(solo, batch)] = solo
                        self._counts["solo_to_batch"] += 1
                        solo = None
                    while waiting and len(running) < self.capacity:
                        live = waiting.popleft()
                        try:
                            self._prepare(live)
                        except Exception as exc:  # the request's fault (template, empty prompt): its error only
                            self._counts["failed"] += 1
                            live.channel.fail(exc if isinstance(exc, BadRequest) else
                                              BadRequest(f"{self.name} cannot run this request: {exc}"))
                            continue
                        if solo_ok and not running and not waiting and solo is None:
                            solo = live
                        else:
                            running[self._to_batch(live, batch)] = live
                    self._running, self._waiting = len(running) + (solo is not None), len(waiting)
                    self._counts["peak_running"] = max(self._counts["peak_running"], self._running)
                    try:
                        if solo is not None:
                            solo = self._solo_step(solo)
                        elif running:
                            self._batch_step(batch, running, alone=len(running) == 1 and not waiting)
                    except Exception as exc:  # fail the jobs of this step, not the model: start a new batch
                        log.exception("runner %s: a step failed", self.name)
                        error = ServiceError(f"{self.name} failed while generating: {type(exc).__name__}: {exc}")
                        self._fail([*running.values(), *([solo] if solo else [])], error)
                        running.clear()
                        solo = None
                        batch.close()
                        batch = self._new_batch(stream)
                    self._running = len(running) + (solo is not None)
        finally:
            batch.close()
            self._fail([*running.values(), *waiting, *([solo] if solo else [])],
                       LoadFailed(f"{self.name} stopped while this request ran: send it again"))

    def _gather(self) -> None:
        """Work arrived at an idle runner: wait a moment for the rest of a burst, so it is prefilled together
        instead of behind the first request's prefill. The moment is at most 5% of the recent time to first
        token (5 ms at most), and ends after 1 ms without a new arrival. Called with the lock held."""
        end = time.monotonic() + min(0.005, 0.05 * self._ttft)
        seen = len(self._inbox)
        while (left := end - time.monotonic()) > 0 and self._lock.wait(min(left, 0.001)):
            if len(self._inbox) == seen:
                return
            seen = len(self._inbox)

    def _new_batch(self, stream):
        spec = self._spec
        return BatchGenerator(self.model, sampler=self._greedy, completion_batch_size=self.capacity,
                              prefill_batch_size=max(1, min(spec.prefill_batch_size, self.capacity)),
                              prefill_step_size=spec.prefill_step_size, stream=stream)

    def _fail(self, jobs: list[_Live], error: ServiceError) -> None:
        for live in jobs:
            if not live.channel.finished:
                self._counts["failed"] += 1
                live.channel.fail(error)

    def _expire(self, waiting: deque[_Live], batch, running: dict[int, _Live], solo: _Live | None):
        """Jobs whose client left or whose deadline passed leave now, before the next step; returns `solo`,
        or None when it left."""
        now = time.monotonic()

        def over(live: _Live) -> bool:
            return live.job.cancel.is_set() or now > live.job.deadline

        for live in [w for w in waiting if over(w)]:
            waiting.remove(live)
            self._end_early(live)
        gone = [uid for uid, live in running.items() if over(live)]
        if gone:
            batch.remove(gone)
            for uid in gone:
                self._end_early(running.pop(uid))
            self._running = len(running) + (solo is not None)
        if solo is not None and over(solo):
            self._drop_steps(solo)
            self._end_early(solo)
            return None
        return solo

    def _end_early(self, live: _Live) -> None:
        if live.job.cancel.is_set():
            self._counts["cancelled"] += 1
            self._finish(live, FinishReason.CANCELLED)
        else:
            self._counts["timed_out"] += 1
            live.channel.fail(GenerationTimeout(f"generation took longer than the {live.job.timeout:g} s limit "
                                                "(MLX_SERVICE_GENERATION_TIMEOUT)"))

    def _prepare(self, live: _Live) -> None:
        """Template, tokenize, find a cached prefix: everything a job needs before it runs, solo or batched."""
        job = live.job
        live.admitted = time.perf_counter()
        with self._tokenizing:
            text, live.tokens = self._render(job)
            live.processors = self._processors(job, text)  # a grammar tokenizes its markers
        if not live.tokens:
            raise BadRequest("the prompt is empty")
        job.fit(len(live.tokens), self._spec.context_length)
        live.cache, rest = self._prefix(live.tokens)
        live.cached = live.fed = len(live.tokens) - len(rest)
        live.detokenizer = self.tokenizer.detokenizer
        live.detokenizer.reset()
        live.matcher = StopMatcher(list(job.stop) + ([] if job.ignore_eos else list(self._spec.stops)))
        live.output = job.output.splitter(text)
        live.sampler = self._sampler(job)

    def _to_batch(self, live: _Live, batch) -> int:
        """Insert a job into the batch with the cache it has so far: it holds `seen[:k]`, the batch feeds the
        rest. A solo job's cache already holds its last token (generate_step runs one step ahead), so that
        one token is trimmed and fed again: the batch needs its logits."""
        self._drop_steps(live)
        seen = live.tokens + live.out
        cache = live.cache
        held = cache[0].offset if live.out else live.fed  # decoding alone means an offset (see `solo_ok`)
        if held >= len(seen):
            if can_trim_prompt_cache(cache):
                trim_prompt_cache(cache, held - len(seen) + 1)
                held = len(seen) - 1
            else:
                cache, held = make_prompt_cache(self.model), 0
        live.cache = None
        job = live.job
        (uid,) = batch.insert([seen[held:]], max_tokens=[job.max_tokens - len(live.out)], caches=[cache],
                              all_tokens=[seen[:held]], samplers=[live.sampler],
                              logits_processors=[live.processors], stop_sequences=[self._stops[job.ignore_eos]])
        live.uid = uid
        return uid

    def _drop_steps(self, live: _Live) -> None:
        if live.steps is not None:
            live.steps.close()
            live.steps = None
            for taker in (live.sampler, *live.processors):  # the step it ran ahead and threw away
                if hasattr(taker, "rewind"):  # drew a random key, and a grammar consumed a token
                    taker.rewind()

    def _solo_step(self, live: _Live) -> _Live | None:
        """One prefill chunk or one token of the solo job; returns it, or None once it finished."""
        job = live.job
        if live.steps is None:
            rest = live.tokens[live.fed:]
            if len(rest) > 1:  # prefill all but the last token, a chunk per loop so newcomers can join
                chunk = rest[: min(self._spec.prefill_step_size, len(rest) - 1)]
                self.model(mx.array(chunk)[None], cache=live.cache)
                mx.eval([c.state for c in live.cache])
                live.fed += len(chunk)
                return live
            live.steps = generate_step(mx.array(rest), self.model, max_tokens=job.max_tokens,
                                       sampler=live.sampler, logits_processors=live.processors or None,
                                       prompt_cache=live.cache, stream=self._stream)
        token, _ = next(live.steps)
        eos = not job.ignore_eos and token in self._eos
        reason = self._token(live, token, eos, len(live.out) + 1 >= job.max_tokens, alone=True)
        if reason is None:
            return live
        self._drop_steps(live)
        self._remember(live.tokens + live.out, live.cache)
        live.cache = None
        self._finish(live, reason)
        return None

    def _batch_step(self, batch, running: dict[int, _Live], alone: bool) -> None:
        _, responses = batch.next()
        self._counts["steps"] += 1
        for r in responses:
            live = running.get(r.uid)
            if live is None:
                continue
            reason = self._token(live, r.token, r.finish_reason == "stop", r.finish_reason == "length", alone)
            if reason is None:
                continue
            del running[r.uid]
            if r.finish_reason is not None:
                self._remember(list(r.all_tokens), r.prompt_cache)
            else:  # a stop string: the batch does not know it, so take the job out
                kept = batch.remove([r.uid], return_prompt_caches=True).get(r.uid)
                if kept is not None:
                    self._remember(list(kept[1]), kept[0])
            self._finish(live, reason)

    def _token(self, live: _Live, token: int, eos: bool, last: bool, alone: bool) -> FinishReason | None:
        """Feed one generated token to its job; the reason the job ends with it, if it does."""
        if not live.first:
            live.first = time.perf_counter()
            self._ttft = 0.8 * self._ttft + 0.2 * (live.first - live.admitted)
        live.out.append(token)
        if not eos:  # the end-of-sequence token itself is not text
            live.detokenizer.add_token(token)
        if eos or last:
            live.detokenizer.finalize()
        self._send(live, live.output.feed(live.matcher.feed(live.detokenizer.last_segment)), alone)
        matched = live.matcher.matched
        if matched is not None:
            live.stop_sequence = matched if matched in live.job.stop else None
            reason = FinishReason.STOP_SEQUENCE if live.stop_sequence else FinishReason.STOP
        elif eos or last:
            self._send(live, live.output.feed(live.matcher.flush()), alone)
            reason = FinishReason.STOP if eos else FinishReason.LENGTH
        else:
            return None
        self._send(live, live.output.finish(), alone)
        return FinishReason.TOOL_CALLS if reason is FinishReason.STOP and live.output.called else reason

    def _send(self, live: _Live, pieces: list, alone: bool) -> None:
        for piece in pieces:  # a lone job's first text is held a moment, to leave with what follows it
            live.channel.put(piece, hold=alone and not live.sent_text and not isinstance(piece, ToolCall))
            live.sent_text = True

    def _finish(self, live: _Live, reason: FinishReason) -> None:
        end = time.perf_counter()
        admitted = live.admitted or end
        first = live.first or end
        self._counts["finished"] += 1
        self._counts["tokens"] += len(live.out)
        live.channel.put(Done(reason, Usage(len(live.tokens), len(live.out), live.cached),
                              Timings(queued=admitted - live.submitted, prompt=first - admitted, decode=end - first),
                              live.stop_sequence))

    # ---- prompt, prefix cache, sampling -------------------------------------------------------------------
    def _prompt_tokens(self, job: Job) -> list[int]:
        with self._tokenizing:  # also called from count_tokens' thread; HF tokenizers are not reentrant
            return self._render(job)[1]

    def _render(self, job: Job) -> tuple[str, list[int]]:
        """The prompt's text (for what the output starts with) and tokens."""
        tokenizer, chat = self.tokenizer, job.chat
        if chat is None:
            return job.prompt or "", list(tokenizer.encode(job.prompt or ""))
        if not getattr(tokenizer, "chat_template", None):
            raise BadRequest(f"model {self.name} has no chat template: use a completion endpoint, or give its "
                             "catalog prompt style a `chat_template`")
        try:
            text = tokenizer.apply_chat_template(list(chat.messages), tools=list(chat.tools) if chat.tools else None,
                                                 add_generation_prompt=True, tokenize=False, **chat.kwargs)
        except Exception as exc:  # templates raise for e.g. unsupported role orders
            raise BadRequest(f"the chat template of {self.name} rejected these messages: {exc}") from exc
        return text, list(tokenizer.encode(text, add_special_tokens=False))

    def _prefix(self, tokens: list[int]):
        """(cache, tokens still to process), reusing the longest cached prefix when prefix caching is on.

        A cached prefix is used only when it covers at least half of the prompt. Taking one costs a copy of the
        cached entry, while recomputing a small share of a prompt costs almost nothing: a short prefill reads
        every weight once however many tokens it holds. (Measured on the 0.5B benchmark model: reusing the 7
        tokens of chat-template header that two different questions share made the first token 126 ms later.)
        """
        cache, rest = None, tokens
        if self.prompt_cache is not None:
            cache, rest = self.prompt_cache.fetch_nearest_cache(self.name, tokens)
            if cache is not None and 2 * (len(tokens) - len(rest)) < len(tokens):
                cache, rest = None, tokens
            if cache is None and self.disk_cache is not None:  # the SSD tier: after an unload or a restart
                found = self.disk_cache.fetch(tokens, least=(len(tokens) + 1) // 2)
                if found is not None:
                    cache, rest = found[0], tokens[found[1]:]
        if cache is not None and not rest:  # exact hit: recompute the last token to get its logits
            if can_trim_prompt_cache(cache):
                trim_prompt_cache(cache, 1)
                rest = tokens[-1:]
            else:
                cache = None
        if cache is None:
            cache, rest = make_prompt_cache(self.model), tokens
        if self.prompt_cache is not None:
            self._counts["cache_hits" if len(rest) < len(tokens) else "cache_misses"] += 1
        return cache, rest

    def _remember(self, seen: list[int], cache) -> None:
        """Store a finished job's cache under the tokens it holds, for the next request sharing the prefix."""
        if self.prompt_cache is None or not cache:
            return
        offset = getattr(cache[0], "offset", None)
        if not isinstance(offset, int) or offset <= 0 or offset > len(seen):
            return
        self.prompt_cache.insert_cache(self.name, seen[:offset], cache)
        if self.disk_cache is not None:  # written by its own thread; nothing changes this cache any more
            self.disk_cache.store(seen[:offset], cache)

    def _sampler(self, job: Job):
        sampler = sampler_for(job.sampling)
        if not (job.ignore_eos and self._eos):
            return sampler
        if sampler is self._greedy:  # one shared object, so the batch still samples greedy jobs in one call
            return self._greedy_banning
        return banning(self._eos, sampler)

    def _processors(self, job: Job, prompt_text: str) -> list:
        penalty = job.sampling.repetition_penalty
        processors = make_logits_processors(repetition_penalty=penalty) if penalty != 1.0 else []
        if job.constraint is not None:
            processors.append(self._guide.processor(job.constraint, prompt_text))
        return processors


def _free() -> None:
    """Return memory to the system once the last reference to a model is gone."""
    gc.collect()
    mx.clear_cache()


def _model_key(spec: LoadSpec) -> str:
    """What a cached prefix belongs to: the model and the exact weights (another revision never matches)."""
    weights = sorted(spec.path.glob("*.safetensors"))
    return "|".join([spec.name, str(spec.path)] + [f"{w.name}:{w.stat().st_size}:{int(w.stat().st_mtime)}"
                                                   for w in weights])
