"""What a SubjectTemplate costs per message: parse on receipt, format on publish.

The template ``orders.{region}.{order_id}.created`` with a pydantic model of two str
fields, against doing it by hand: ``subject.split(".")`` and ``model_validate`` of the
tokens (which checks neither the literal tokens nor the token rules), and an f-string
of validated values (which checks no token). Each case counts the results that came
out right, and the subjects differ per message (a fresh order ID each), so no cache
flatters either side.
"""

from __future__ import annotations

from pydantic import BaseModel

from bench.harness import Table, interleave
from bench.sizes import Sizes
from goflux import SubjectTemplate

HAND_PARSE = "split + model_validate (by hand)"
TEMPLATE_PARSE = "SubjectTemplate.parse"
HAND_FORMAT = "model_validate + f-string (by hand)"
TEMPLATE_FORMAT = "SubjectTemplate.format"


class OrderKey(BaseModel):
    region: str
    order_id: str


TEMPLATE = SubjectTemplate("orders.{region}.{order_id}.created", OrderKey)


def run(rounds: int, sizes: Sizes) -> list[Table]:
    n = sizes.codec_ops
    ids = [f"o-{i}" for i in range(n)]
    subjects = [f"orders.eu.{order_id}.created" for order_id in ids]
    parse = TEMPLATE.parse
    format_ = TEMPLATE.format

    def hand_parse() -> int:
        done = 0
        for i, subject in enumerate(subjects):
            tokens = subject.split(".")
            key = OrderKey.model_validate({"region": tokens[1], "order_id": tokens[2]})
            done += key.order_id == ids[i]
        return done

    def template_parse() -> int:
        done = 0
        for i, subject in enumerate(subjects):
            done += parse(subject).order_id == ids[i]
        return done

    def hand_format() -> int:
        done = 0
        for i, order_id in enumerate(ids):
            key = OrderKey.model_validate({"region": "eu", "order_id": order_id})
            done += f"orders.{key.region}.{key.order_id}.created" == subjects[i]
        return done

    def template_format() -> int:
        done = 0
        for i, order_id in enumerate(ids):
            done += format_(region="eu", order_id=order_id) == subjects[i]
        return done

    return [
        Table(
            "template_parse",
            "Parse a received subject into typed parameters (two str fields)",
            interleave(
                {HAND_PARSE: hand_parse, TEMPLATE_PARSE: template_parse}, rounds, expected=n
            ),
            HAND_PARSE,
            note="CPU µs/op is the cost per message; the template also checks every "
            "literal token and the token rules.",
            versus="by hand",
        ),
        Table(
            "template_format",
            "Format a subject from parameters (two str fields)",
            interleave(
                {HAND_FORMAT: hand_format, TEMPLATE_FORMAT: template_format}, rounds, expected=n
            ),
            HAND_FORMAT,
            note="The template also refuses unknown parameters and values that are not one token.",
            versus="by hand",
        ),
    ]
