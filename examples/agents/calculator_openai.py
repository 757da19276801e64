"""A calculator tool-use agent written against the ``openai`` client, for ``agent.executor=openai``.

Rows look like ``{"input": "6*7=", "label": "42"}`` (examples/agents/calculator.jsonl). The prompt goes to the
model as the user message (the server applies the chat template, so set ``data.apply_chat_template=false``). When a
reply contains ``calc(<expression>)`` the agent evaluates it and answers with ``calc: <result>`` as the next user
message, at most MAX_TOOL_CALLS times; the final reply should start with the answer.

Reward: 1.0 when the final answer equals the label, 0.2 for a wrong answer after a well-formed tool call, 0.1 for
a wrong number without one (so that a model which starts from noise, like the tiny one, sees some signal), else 0.
Every chat call of an episode becomes one action range of a single trajectory (the tool results are masked out of
the loss).
"""

from __future__ import annotations

import ast
import operator
import re

MAX_TOOL_CALLS = 2
CALL = re.compile(r"calc\(([0-9+\-*/ ()]{1,40})\)")
_NUMBER = re.compile(r"\s*(-?\d+)")
_SPECIAL = re.compile(r"<\|[a-z]+\|>")
_OPS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv,
    ast.Div: operator.floordiv,
    ast.USub: operator.neg,
}


def calculate(expression: str) -> str:
    """The integer value of an arithmetic expression (+ - * / on integers), or "error"."""

    def value(node: ast.AST) -> int:
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            left, right = value(node.left), value(node.right)
            if abs(left) > 10**9 or abs(right) > 10**9:
                raise ValueError("too large")
            return _OPS[type(node.op)](left, right)
        if isinstance(node, ast.UnaryOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](value(node.operand))
        raise ValueError(f"unsupported: {ast.dump(node)}")

    try:
        return str(value(ast.parse(expression, mode="eval").body))
    except (SyntaxError, ValueError, ZeroDivisionError):
        return "error"


def final_answer(text: str) -> str | None:
    match = _NUMBER.match(CALL.sub("", _SPECIAL.sub("", text)))
    return str(int(match.group(1))) if match else None


async def run_agent(prompt: str, label: str, session) -> dict:
    client = session.client()
    messages = [{"role": "user", "content": prompt}]
    tool_calls = 0
    while True:
        reply = await client.chat.completions.create(model=session.model, messages=messages)
        text = reply.choices[0].message.content or ""
        messages.append({"role": "assistant", "content": text})  # verbatim: keeps the session's tokens stable
        call = CALL.search(text)
        if call is None or tool_calls >= MAX_TOOL_CALLS:  # (a spent length budget gives empty text: no call)
            break
        tool_calls += 1
        messages.append({"role": "user", "content": f"calc: {calculate(call.group(1))}"})
    answer = final_answer(text)
    correct = answer == str(label).strip()
    reward = 1.0 if correct else 0.2 if tool_calls else 0.1 if answer is not None else 0.0
    return {
        "reward": reward,
        "scores": float(correct),
        "extra_logs": {"tool_calls": float(tool_calls), "correct": float(correct)},
    }
