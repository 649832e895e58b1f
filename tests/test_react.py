"""The ReAct tool layer: replies become tool calls, final answers, or feedback; never a crash."""

from esopt.agent.react import ReActEnv, parse_call, tool_instructions


class Echo:
    """A real (trivial) tool: returns its argument reversed, and records the task it saw."""

    name = "echo"
    description = "echo text back reversed"

    def __init__(self):
        self.calls = []

    def __call__(self, argument, task):
        self.calls.append((argument, task))
        return argument[::-1]


class Judge:
    """A task env that accepts 'Answer: 42' and asks for an answer otherwise."""

    def reset(self, task):
        self.k = 0
        return f"question {task}"

    def step(self, action):
        if "Answer: 42" in action:
            return "correct", 1.0, True, {"success": True, "answer": "42"}
        self.k += 1
        return "No final answer found.", 0.0, False, {"invalid_actions": self.k}


def test_parse_call_finds_the_first_complete_call_of_a_known_tool():
    assert parse_call("think <echo>abc</echo> more", ["echo"]) == ("call", "echo", "abc")
    assert parse_call("<echo>\nx = 1\n</echo>", ["echo"]) == ("call", "echo", "x = 1")
    assert parse_call("<echo>abc", ["echo"]) == ("unclosed", "echo", "abc")
    assert parse_call("<calc>1+1</calc>", ["echo"]) == ("unknown", "calc", "")
    assert parse_call("a <b> bold", ["echo"]) is None  # a lone tag in prose is not a call
    assert parse_call("Answer: 42 <echo>x</echo>", ["echo"]) is None  # after the answer
    assert parse_call("no tags at all", ["echo"]) is None


def test_tool_call_runs_the_tool_on_the_task_and_returns_its_output():
    echo = Echo()
    env = ReActEnv(Judge(), [echo])
    assert env.reset("T1") == "question T1"
    obs, r, done, info = env.step("<echo>abc</echo>")
    assert (obs, r, done) == ("cba", 0.0, False)
    assert echo.calls == [("abc", "T1")] and info["tool_calls"] == 1
    obs, r, done, info = env.step("Answer: 42")
    assert done and r == 1.0 and info["success"] and info["tool_calls"] == 1


def test_malformed_calls_get_feedback_and_run_nothing():
    echo = Echo()
    env = ReActEnv(Judge(), [echo])
    env.reset("T")
    obs, r, done, info = env.step("<echo>never closed")
    assert "no closing </echo>" in obs and not done and info["malformed_calls"] == 1
    obs, _, done, info = env.step("<python>print(1)</python>")
    assert "Unknown tool <python>" in obs and "<echo>...</echo>" in obs and info["malformed_calls"] == 2
    obs, _, done, info = env.step("I do not know")
    assert obs == "No final answer found." and not done
    assert echo.calls == []


def test_tool_budget_is_enforced_with_feedback():
    echo = Echo()
    env = ReActEnv(Judge(), [echo], max_tool_calls=1)
    env.reset("T")
    env.step("<echo>a</echo>")
    obs, _, done, info = env.step("<echo>b</echo>")
    assert "No tool calls left" in obs and not done and len(echo.calls) == 1


def test_untrusted_garbage_never_raises():
    env = ReActEnv(Judge(), [Echo()])
    env.reset("T")
    for junk in ["", "<", "</echo>", "<echo></echo>", "<<echo>>", "\\boxed{", "<echo>" * 50, "\x00\uffff<echo>\x00</echo>"]:
        obs, r, done, info = env.step(junk)
        assert isinstance(obs, str)


def test_instructions_document_every_tool_and_the_answer_format():
    text = tool_instructions([Echo()])
    assert "<echo>...</echo> echo text back reversed" in text and "Answer: <answer>" in text
