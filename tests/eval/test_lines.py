"""Lines said again with a word or two changed, outside a list (`nbutils.eval.lines`, judged inside `detect`): a stuck
line that varies, and comes back as it was among its variants, is a loop; a catalog's messages from one template,
a list's short steps and a program's output are not."""

from nbutils.eval.detect import _tokens, detect
from nbutils.eval.lines import LINE_COPIES, line_loop

# A real model's ghost story, to the token limit.
GIFT = ["I used to have the most incredible gift, but now I am no longer the same",
        "I have the most incredible gift, but I am no longer the same",
        "I have the most incredible gift, but I am not the same",
        "I have the most incredible gift, but I am not the same",
        "I have the most incredible gift, but I am no longer the same"]


def test_a_line_said_again_with_a_word_changed_and_once_as_it_was_is_a_loop():
    text = "The house was quiet.\n\n" + "\n\n".join(GIFT) + "\n\nI have the most"
    m: dict = {}
    assert line_loop(text, _tokens, m) and m["line_copies"] == LINE_COPIES
    assert detect(text).reasons == ["loop"]
    assert not line_loop("\n\n".join(GIFT[:3]) + "\n\n", _tokens, {})  # three lines, none said as it was


def test_a_catalogs_messages_a_lists_steps_and_a_programs_output_are_not_lines_said_again():
    catalog = "".join(f"%s: more than one -{o} option given\n\n" for o in "Ldlpr")  # -L and -l differ as written
    assert not line_loop(catalog, _tokens, {})
    workspace = "".join(f"Move the window to workspace {n} of the desk\n" for n in (12, 2, 3, 4, 5))
    assert not line_loop(workspace, _tokens, {})  # new numbers, no line said again as it was
    steps = "".join(f"{i}. Cube the {w} layers of the original cube.\n" for i, w in
                    enumerate(("top", "remaining", "remaining", "top"), 1))
    assert not line_loop(steps, _tokens, {})  # a list's items: items.py judges them
    commands = "".join(f"python -m pip install -U {p}\n" for p in ("typer", "packaging", "typer", "rich"))
    assert not line_loop(commands, _tokens, {})  # commands, a package changed each time
    output = "```\n" + "Reads up to size bytes, with at most one read() system call.\n" * 4
    assert not line_loop(output, _tokens, {})  # one line said again and again: the loop rules judge it
