"""The vision runner: image-and-text chat on mlx-vlm, one generation at a time per model.

Serial, not batched: mlx-vlm's batch path (`batch_generate`) takes a fixed set of prompts and returns when all
are done, with no way to add a request to a running batch or to stream each one, so a model's requests queue
on its thread instead. Everything else is the text runner's: the job's template, stop strings, output
splitting, sampling and grammar, the generation deadline and cancellation (checked at every token).
"""

from __future__ import annotations

import asyncio
import io
import time

import anyio
from mlx.utils import tree_flatten

from ..engine.events import Done, FinishReason, Timings, ToolCall, Usage
from ..engine.job import Job
from ..engine.stops import StopMatcher
from ..errors import BadRequest, GenerationTimeout, ServiceError
from .base import LoadSpec
from .channel import Channel
from .guidance import Guide
from .sampling import banning, sampler_for
from .worker import SerialRunner


class VisionRunner(SerialRunner):
    def __init__(self, spec: LoadSpec):
        super().__init__(spec)
        self.model = self.processor = self.tokenizer = None
        self._counts.update(cancelled=0, timed_out=0, tokens=0, images=0)

    def _load(self) -> None:
        import mlx_vlm

        self.model, self.processor = mlx_vlm.load(str(self.spec.path),
                                                  trust_remote_code=self.spec.trust_remote_code)
        self.tokenizer = getattr(self.processor, "tokenizer", self.processor)
        if self.spec.chat_template and (self.spec.override_template
                                        or not getattr(self.tokenizer, "chat_template", None)):
            self.tokenizer.chat_template = self.spec.chat_template
        self.memory_bytes = sum(v.nbytes for _, v in tree_flatten(self.model.parameters()))
        eos = getattr(self.tokenizer, "eos_token_id", None)
        self._eos = [eos] if isinstance(eos, int) else list(eos or [])
        self._guide = Guide(self.tokenizer, self._eos)

    # ---- event loop side ----------------------------------------------------------------------------------
    async def submit(self, job: Job):
        channel = Channel(asyncio.get_running_loop())
        work = asyncio.ensure_future(self.worker.run(lambda: self._generate(job, channel)))
        try:
            while events := await channel.get():
                for event in events:
                    yield event
        finally:
            if not channel.finished:  # the reader left: stop at the next token, and wait until it has
                job.cancel.set()
                with anyio.CancelScope(shield=True):
                    await channel.wait_finished()
            with anyio.CancelScope(shield=True):
                await work

    async def count_tokens(self, job: Job) -> int:
        return await self.worker.run(lambda: len(self._inputs(job)[0]["input_ids"][0]))

    def _release(self) -> None:
        self.model = self.processor = self.tokenizer = None

    # ---- runner thread ------------------------------------------------------------------------------------
    def _inputs(self, job: Job):
        """(mlx-vlm's prepared inputs, the prompt text, the images): prepared once, here, and handed to
        `stream_generate` as they are (it would prepare them again)."""
        from mlx_vlm.utils import prepare_inputs, should_add_special_tokens
        from PIL import Image

        if job.chat is None:
            text = job.prompt or ""
        else:
            try:
                text = self.tokenizer.apply_chat_template(list(job.chat.messages), add_generation_prompt=True,
                                                          tokenize=False, **job.chat.kwargs)
            except Exception as exc:
                raise BadRequest(f"the chat template of {self.name} rejected these messages: {exc}") from exc
        images = [Image.open(io.BytesIO(image.data)).convert("RGB") for image in job.images]
        config = self.model.config
        inputs = prepare_inputs(self.processor, images=images or None, prompts=text,
                                image_token_index=getattr(config, "image_token_index", None),
                                add_special_tokens=should_add_special_tokens(config.model_type, self.processor))
        return inputs, text, images

    def _generate(self, job: Job, channel: Channel) -> None:
        import mlx_vlm

        started = time.perf_counter()
        first = 0.0
        try:
            inputs, text, images = self._inputs(job)
            prompt_tokens = len(inputs["input_ids"][0])
            job.fit(prompt_tokens, self.spec.context_length)
            matcher = StopMatcher(list(job.stop) + ([] if job.ignore_eos else list(self.spec.stops)))
            splitter = job.output.splitter(text)
            sampler = sampler_for(job.sampling)
            if job.ignore_eos and self._eos:
                sampler = banning(self._eos, sampler)
            processors = [self._guide.processor(job.constraint, text)] if job.constraint is not None else None
            if job.sampling.repetition_penalty != 1.0:
                from mlx_lm.sample_utils import make_logits_processors

                processors = (processors or []) + make_logits_processors(
                    repetition_penalty=job.sampling.repetition_penalty)
            reason, count, sent = FinishReason.LENGTH, 0, False
            prepared = {k: v for k, v in inputs.items() if k not in ("input_ids", "pixel_values", "attention_mask")}
            for r in mlx_vlm.stream_generate(self.model, self.processor, text, image=images or None,
                                              input_ids=inputs["input_ids"], pixel_values=inputs.get("pixel_values"),
                                              mask=inputs.get("attention_mask"), max_tokens=job.max_tokens,
                                              sampler=sampler, logits_processors=processors,
                                              prefill_step_size=self.spec.prefill_step_size, **prepared):
                if job.cancel.is_set():
                    reason = FinishReason.CANCELLED
                    break
                if time.monotonic() > job.deadline:
                    self._counts["timed_out"] += 1
                    raise GenerationTimeout(f"generation took longer than the {job.timeout:g} s limit "
                                            "(MLX_SERVICE_GENERATION_TIMEOUT)")
                first = first or time.perf_counter()
                count = max(count, r.generation_tokens)
                for piece in splitter.feed(matcher.feed(r.text)):
                    channel.put(piece, hold=not sent and not isinstance(piece, ToolCall))
                    sent = True
                if matcher.matched is not None:
                    reason = FinishReason.STOP_SEQUENCE if matcher.matched in job.stop else FinishReason.STOP
                    break
                if r.finish_reason == "stop":
                    reason = FinishReason.STOP
            else:
                for piece in splitter.feed(matcher.flush()):
                    channel.put(piece)
            for piece in splitter.finish():
                channel.put(piece)
            if reason is FinishReason.STOP and splitter.called:
                reason = FinishReason.TOOL_CALLS
            end = time.perf_counter()
            first = first or end
            self._counts["finished"] += 1
            self._counts["cancelled"] += reason is FinishReason.CANCELLED
            self._counts["tokens"] += count
            self._counts["images"] += len(images)
            channel.put(Done(reason, Usage(prompt_tokens, count, 0),
                             Timings(queued=0.0, prompt=first - started, decode=end - first),
                             matcher.matched if reason is FinishReason.STOP_SEQUENCE else None))
        except ServiceError as exc:
            channel.fail(exc)
        except Exception as exc:  # a bug or a model failure: this request's error, not the runner's
            channel.fail(ServiceError(f"{self.name} failed while generating: {type(exc).__name__}: {exc}"))


open_runner = VisionRunner.open
