"""What `auto` mode knows of this machine: its measured costs, and what each route learned.

Calibration measures the models once per machine and setting (seconds to minutes, then read
from `localspec.auto_io`'s cache); each route's tuner starts from it and from the acceptance
earlier runs saved, and what a generation learns is saved when it ends. None of this is
generation: the runtime asks for a route's drafter before a generation and hands it back
after, and everything else here is bookkeeping around the models (`localspec.loading`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from localspec.auto_io import (
    TunerStore,
    calibration_key,
    measure_catchup,
    measure_draft,
    measure_mtp,
    measure_tie_noise,
    measure_verify,
    pair_key,
)
from localspec.loading import Models
from localspec.paths import PrivatePathError
from localspec.speculative.auto import AutoDrafter
from localspec.speculative.costs import LiveCosts
from localspec.speculative.ngram import NGramProposer
from localspec.speculative.tuner import HardwareProfile, Tuner

_log = logging.getLogger(__name__)


class Calibration:
    """The hardware profile of `models` and a tuner per route, with their saved state.

    `notify` receives one-line notices of slow one-time work (calibration) for the user.
    """

    def __init__(self, models: Models, ngram: NGramProposer, notify: Callable[[str], None]) -> None:
        self.models = models
        self.ngram = ngram
        self._notify = notify
        self._store = TunerStore()
        self._profile: HardwareProfile | None = None
        self._looked_up = False  # for a stored profile, by `known_profile`
        self._tuners: dict[str, Tuner] = {}
        self._costs: LiveCosts | None = None  # one machine: every route's tuner shares them

    def hardware_profile(self, *, recalibrate: bool = False) -> HardwareProfile:
        """This machine's costs for these models, measured once and then read from the cache.

        Measuring the draft needs it loaded; when even a perfectly accepted draft could not
        beat plain decoding here, it is unloaded again and later runs never load it.
        """
        if self._profile is not None and not recalibrate:
            return self._profile
        key = self._calibration_key()
        profile = None if recalibrate else self._store.profile(key)
        if profile is None:
            profile = self._measure()
            self._store.save_profile(key, profile)
            # what was learned was measured against the old calibration
            self._store.forget_costs(key)
            self._costs = None
            for tuner in self._tuners.values():
                tuner.costs = LiveCosts(catchup_s=tuner.calibrated_catchup_s)
        self._profile = profile
        return profile

    def known_profile(self) -> HardwareProfile | None:
        """The profile if it was measured or is stored, without measuring (the guard's
        estimate of plain decoding's speed needs no calibration of its own)."""
        if self._profile is None and not self._looked_up:
            self._looked_up = True
            self._profile = self._store.profile(self._calibration_key())
        return self._profile

    def _measure(self) -> HardwareProfile:
        """Time the target's verification batches and, where there is a draft, its steps."""
        self._notify(
            "measuring this machine for speculation (once per model pair and setting; cached)"
        )
        settings, models = self.models.settings, self.models
        verify = measure_verify(models.target_context, settings.tune_k_max)
        tie_noise = measure_tie_noise(models.target_context, settings.tune_k_max)
        draft_s = catchup_s = None
        was_loaded = models.draft_context is not None
        if settings.draft is not None:
            models.load_draft()
            assert models.draft_context is not None
            draft_s = measure_draft(models.draft_context)
            catchup_s = measure_catchup(models.draft_context)
        elif models.mtp_head is not None:
            draft_s = measure_mtp(models.mtp_head, models.target_context)
            catchup_s = 0.0  # the head follows the target: it is never behind
        profile = HardwareProfile(verify, draft_s, tie_noise, catchup_s)
        never_pays = not profile.draft_can_ever_pay(settings.tune_k_max)
        if draft_s is not None and not was_loaded and never_pays:
            self.models.unload_draft()
        return profile

    def _calibration_key(self) -> str:
        """What this machine's calibration and measured costs are kept under: the models,
        threads, offload, k_max and KV cache they were measured with."""
        settings = self.models.settings
        return calibration_key(
            settings.target,
            settings.draft,
            self.models.target_context.n_threads,
            (settings.target_gpu_layers, settings.draft_gpu_layers),
            settings.tune_k_max,
            flash_attn=settings.flash_attn,
            value_cache=self.models.target_context.value_cache,
            mtp=settings.mtp,
        )

    def auto_for(self, route: str, ngram: NGramProposer | None = None) -> AutoDrafter:
        """The drafter for a generation on `route`, its tuner kept for the next one; `ngram`
        is the sequence's n-gram proposer where a server keeps one per slot."""
        profile = self.hardware_profile()
        settings = self.models.settings
        tuner = self._tuners.get(route)
        if tuner is None:
            acceptance = self._store.acceptance(self._acceptance_key(route))
            # AutoDrafter scores every n-gram lookup it does not draft, so no n-gram exploration
            tuner = Tuner(profile, acceptance, k_max=settings.tune_k_max, explore_ngram=False)
            if self._costs is None:
                saved = self._store.costs(self._calibration_key(), tuner.calibrated_catchup_s)
                self._costs = saved or tuner.costs
            tuner.costs = self._costs
            self._tuners[route] = tuner
        drafts = settings.draft is not None or settings.mtp
        usable = drafts and profile.draft_can_ever_pay(tuner.k_max)
        loader = self.models.load_draft if usable else None
        lookup = ngram or self.ngram
        return AutoDrafter(tuner, lookup, loader, lambda: self.models.draft is not None)

    def _acceptance_key(self, route: str) -> str:
        settings = self.models.settings
        return f"{pair_key(settings.target, settings.draft, mtp=settings.mtp)}/{route}"

    def save_learned(self, route: str) -> None:
        """Persist the route's acceptance statistics and the measured costs; a failure costs
        only what was learned."""
        tuner = self._tuners[route]
        try:
            self._store.save_acceptance(self._acceptance_key(route), tuner.acceptance)
            self._store.save_costs(self._calibration_key(), tuner.costs)
        except (OSError, PrivatePathError) as exc:
            _log.warning(
                "could not save the tuner's statistics to %s: %s",
                self._store.acceptance_file,
                (exc.strerror if isinstance(exc, OSError) else None) or exc,
            )
