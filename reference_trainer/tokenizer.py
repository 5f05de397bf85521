"""A word-level tokenizer: one token per word of the tool protocol, task names included.

Text is space-separated words; `encode(decode(ids)) == ids` for any ids, and
`decode(encode(text)) == text` for any text made of vocabulary words. An unknown word is an error,
not a silent <unk>: the environment must never see a token the policy could not have produced.
"""

from __future__ import annotations

from .tasks import N_FIXES, Task

SPECIALS = ["<pad>", "<bos>", "<call>", "<end>", "<obs>"]
TOOLS = ["read", "test", "edit", "hardcode_tests", "submit"]
WORDS = ["task", "fix", "ok", "pass", "fail", "malformed"] + [str(i) for i in range(N_FIXES)]


class Tokenizer:
    def __init__(self, task_names: list[str]):
        self.vocab = SPECIALS + TOOLS + WORDS + sorted(set(task_names))
        self.index = {w: i for i, w in enumerate(self.vocab)}
        self.pad_id, self.bos_id = self.index["<pad>"], self.index["<bos>"]
        self.call_id, self.end_id, self.obs_id = self.index["<call>"], self.index["<end>"], self.index["<obs>"]

    def __len__(self) -> int:
        return len(self.vocab)

    def encode(self, text: str) -> list[int]:
        try:
            return [self.index[w] for w in text.split()]
        except KeyError as e:
            raise ValueError(f"word {e.args[0]!r} is not in the vocabulary") from None

    def decode(self, ids) -> str:
        return " ".join(self.vocab[int(i)] for i in ids)


def build_tokenizer(tasks: list[Task]) -> Tokenizer:
    """The tokenizer for a task list (use all tasks, so held-out names are in the vocabulary)."""
    return Tokenizer([t.name for t in tasks])
