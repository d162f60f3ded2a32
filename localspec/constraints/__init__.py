"""Constrained generation: output that must match a JSON schema, a regex or a grammar.

`Constraint` is the request's description (plain data); `compile` builds the constraint
library's tokenizer for a model's vocabulary and a per-generation `Guide` from a constraint;
`guide` holds the operations speculation needs (mask a position, validate a draft, roll back).
"""

from localspec.constraints.constraint import Constraint, ConstraintKind
from localspec.errors import ConstraintError

__all__ = ["Constraint", "ConstraintError", "ConstraintKind"]
