"""The reports of `bert_trace.attribute`, `bert_trace.heads`, `bert_trace.ablate` and
`bert_trace.rollout`: the command's JSON as a dict, which a notebook shows as the picture
`bert-trace view` draws of it."""

import json as _json


class Report(dict):
    """A command's JSON report (`bert-trace attribute --json`, `bert-trace heads --json`,
    `bert-trace ablate --json`, `bert-trace rollout --json`)."""

    def _repr_html_(self) -> str:
        from ._bert_trace import _picture

        return _picture(_json.dumps(self))
