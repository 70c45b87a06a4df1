"""CoDesignCallback: co-design inside an existing Lightning training.

Add one callback to a ``lightning.pytorch.Trainer``; it infers the model's
architecture, fake-quantizes it (NVFP4 by default) for the run, logs the
roofline prediction of its serving cost on the chosen GPU, warns about shapes
that miss tile alignment and, inside an Optuna trial, records validation losses
and stops poor runs::

    from co_design.callback import CoDesignCallback
    trainer = Trainer(callbacks=[CoDesignCallback("b200")])

Imports lightning, torch and optuna (the last only when a trial is used).
"""

from co_design.callback._callback import CoDesignCallback, CoDesignWarning
from co_design.readers.base import ArchitectureInference
from co_design.readers.modules import architecture_mismatches, infer_architecture
from co_design.callback._stopping import (
    INTERMEDIATE_VALUES_ATTR,
    PRUNED_AT_STEP_ATTR,
    MedianStoppingRule,
    StopDecision,
    StoppingRule,
)

__all__ = [
    "CoDesignCallback",
    "MedianStoppingRule",
    "StoppingRule",
    "StopDecision",
    "CoDesignWarning",
    "ArchitectureInference",
    "infer_architecture",
    "architecture_mismatches",
    "INTERMEDIATE_VALUES_ATTR",
    "PRUNED_AT_STEP_ATTR",
]
