"""Reading OpenRLHF training scripts without running them (rlhf.importers.shell)."""

from __future__ import annotations

import pytest

from rlhf.importers.shell import ShellSyntaxError, parse_script


def words(text: str) -> list[list[str]]:
    return [c.words for c in parse_script(text)]


def test_continuations_quotes_and_ansi_c_strings():
    text = "python -m x \\\n  --a 'one two' --b \"x $HOME_SET\" \\\n  --t $'User: {}\\nAssistant: ' # comment\n"
    assert words("HOME_SET=h\n" + text) == [
        ["python", "-m", "x", "--a", "one two", "--b", "x h", "--t", "User: {}\nAssistant: "]
    ]


def test_arrays_with_comments_and_variables_set_earlier():
    text = """
MODEL=org/model
ARGS=(
   --pretrain ${MODEL}   # the policy
   # --reward_pretrain ${RM}
   --save_path "${OUT:-/tmp/out}/final"
)
MORE=(--x 1)
MORE+=(--y 2)
run "${ARGS[@]}" ${MORE[@]}
"""
    assert words(text) == [["run", "--pretrain", "org/model", "--save_path", "/tmp/out/final", "--x", "1", "--y", "2"]]


def test_unquoted_expansion_is_word_split_and_unset_variables_stay_as_written():
    cmds = parse_script('FLAGS="--a 1 --b"\nrun $FLAGS "$FLAGS" $NOPE ${EMPTY:-} "$@"\n')
    assert cmds[0].words == ["run", "--a", "1", "--b", "--a 1 --b", "${NOPE}", "$@"]
    assert cmds[0].unknown == {5: ("${NOPE}",), 6: ("$@",)}  # set outside the script: unknown here, never dropped
    assert cmds[0].unset == ["NOPE"]
    assert all(type(w) is str for w in cmds[0].words)


def test_heredoc_read_into_a_variable_then_expanded():
    text = "P=./ckpt\nread -r -d '' cmd <<EOF\nopenrlhf.cli.train_sft \\\n   --save_path $P/sft \\\n   --bf16\nEOF\n"
    text += "deepspeed --module $cmd\n"
    assert words(text) == [["deepspeed", "--module", "openrlhf.cli.train_sft", "--save_path", "./ckpt/sft", "--bf16"]]


def test_command_substitutions_stay_as_text_and_are_reported():
    cmds = parse_script('DIR=$(cd "$(dirname "$0")" && pwd)\nrun --save_path ${DIR}/x 2>&1 | tee log\n')
    assert cmds[0].words == ["run", "--save_path", '$(cd "$(dirname "$0")" && pwd)/x']
    assert cmds[0].unknown == {2: ('$(cd "$(dirname "$0")" && pwd)',)}
    assert cmds[1].words == ["tee", "log"]


def test_a_substitution_with_blanks_stays_one_word_after_word_splitting():
    cmds = parse_script('TAG="run-$(date +%m-%d %H)"\nSTAMP=`date +%s`\nrun --name $TAG --n $STAMP\n')
    assert cmds[0].words == ["run", "--name", "run-$(date +%m-%d %H)", "--n", "`date +%s`"]
    assert cmds[0].unknown == {2: ("$(date +%m-%d %H)",), 4: ("`date +%s`",)}


def test_home_and_the_working_directory_mean_the_same_where_the_recipe_runs():
    cmds = parse_script('OUT=$(pwd)/ckpt\nrun --data $HOME/d.parquet --out ${OUT} --w "$PWD/x"\n')
    assert cmds[0].words == ["run", "--data", "~/d.parquet", "--out", "./ckpt", "--w", "./x"]
    assert cmds[0].unknown == {}


def test_unknown_text_in_a_heredoc_command_survives_word_splitting():
    text = "read -r -d '' cmd <<EOF\nopenrlhf.cli.train_sft --save_path ${SAVE}/sft --bf16\nEOF\n"
    text += "deepspeed --module $cmd\n"
    cmds = parse_script(text)
    assert cmds[0].words == ["deepspeed", "--module", "openrlhf.cli.train_sft", "--save_path", "${SAVE}/sft", "--bf16"]
    assert cmds[0].unknown == {4: ("${SAVE}",)}


def test_control_flow_keywords_and_separators():
    text = 'if [[ ${1} != "slurm" ]]; then\n    deepspeed --module m --a 1\nfi\nset -x && echo done\n'
    assert ["deepspeed", "--module", "m", "--a", "1"] in words(text)
    assert ["echo", "done"] in words(text)


@pytest.mark.parametrize("text", ["run 'open", 'run "open', "X=(a b", "cat <<EOF\nno end\n"])
def test_unterminated_constructs_are_errors_with_the_line(text):
    with pytest.raises(ShellSyntaxError, match="line"):
        parse_script(text)


def test_arithmetic_expansion_is_computed_from_variables_set_earlier():
    text = "n=4\nlen=$((1024 * 2))\nrun a=$(( (len + 512) / n )) b=$((7 / -2)) c=$((7 % 3)) d=$((x + 1)) e=$((2**3))\n"
    cmds = parse_script(text)
    assert cmds[0].words == ["run", "a=640", "b=-3", "c=1", "d=$((x + 1))", "e=$((2**3))"]
    assert cmds[0].unknown == {4: ("$((x + 1))",), 5: ("$((2**3))",)}  # an unset name, an operator not read here
