"""Field types and the base model every config section shares (pydantic only: no torch, no registries)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Strict


def _no_bool(v: Any) -> Any:
    if isinstance(v, bool):
        raise ValueError("must be a number, not true/false")
    return v


#: a float field: finite (the models set allow_inf_nan=False) and never true/false.
Float = Annotated[float, BeforeValidator(_no_bool)]
#: an int field: strict, so true/false (which pydantic would coerce to 1/0) and 4.0 do not pass.
Int = Annotated[int, Strict()]
#: a yes/no field: true or false only (not 1, "yes" or "on").
Bool = Annotated[bool, Strict()]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
