"""GRPO: a tiny CPU run of a few steps whose rewards come from real verifier runs, one sandbox per sample."""

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

GRADE = '''
import os

def grade(transcript, workspace_path):
    data = open(os.path.join(workspace_path, "input/data.txt")).read()
    return {
        "answer_written": float(os.path.exists(os.path.join(workspace_path, "output/answer.txt"))),
        "input_intact": float(data == "1 2 3\\n"),
        "saw_completion": float(any(m.get("role") == "assistant" for m in transcript)),
    }
'''


def _factory():
    from clawgym.sandbox import get_factory

    try:  # an isolating backend when this machine has one, else the local one
        f = get_factory("bwrap")
        with f.open([]) as sb:
            assert sb.exec("true").ok
        return f
    except Exception:
        return get_factory("local")


def test_sandbox_env_tools_and_verifier():
    from clawgym.agent.tools import execute_tool
    from clawgym.tasks.model import File, Task, Verifier
    from clawgym.train.grpo import SandboxEnvFactory

    task = Task(task_id="sum-1", instruction="Write the sum of input/data.txt to output/answer.txt",
                files=[File(path="input/data.txt", content=b"1 2 3\n")], verifier=Verifier(kind="grade", code=GRADE))
    envs = SandboxEnvFactory({task.task_id: task}, _factory())
    env = envs()
    env.reset(task_id="sum-1")
    assert "1 2 3" in env.read("input/data.txt")
    assert env.read(path="input/data.txt", offset=2) == execute_tool(env.sandbox, "read", {
        "path": "input/data.txt", "offset": 2}).content  # the agent's executor: its text is the tool message
    env.write("output/answer.txt", "6\n")
    assert "Command exited with code 3" in env.exec(command="exit 3")
    assert env.calls[-1] == {"name": "exec", "arguments": {"command": "exit 3"}}
    assert env._score([{"role": "assistant", "content": "done"}]) == pytest.approx(1.0)
    assert env.sandbox is None  # closed after scoring
    env.reset(task_id="sum-1")  # a fresh sandbox: the previous answer is gone
    assert env._score([]) == pytest.approx(1 / 3)
    assert len(envs.opened) == 2
    other = SandboxEnvFactory({}, None)  # no state shared through the class: another run sees nothing of this one
    assert other.opened == [] and other().tasks == {}


def test_sandbox_env_tools_are_the_agents_tool_surface(tmp_path):
    """GRPO's environment exposes the agent's one tool surface (clawgym.agent.tools.TOOL_SCHEMAS): one method per
    schema, which TRL finds (public functions of the class) and renders (transformers' get_json_schema) as that
    schema, and which the GRPO tokenizer renders exactly as the builtin loop sends it. The class keeps no state."""
    import inspect

    from transformers.utils import get_json_schema

    from clawgym.agent.tools import TOOL_SCHEMAS
    from clawgym.train.base_model import make_tiny_model
    from clawgym.train.grpo import SandboxEnv, SandboxEnvFactory, grpo_tokenizer

    tools = [n for n, _ in inspect.getmembers(SandboxEnv, predicate=inspect.isfunction)  # what TRL lists
             if not n.startswith("_") and n not in ("reset", "get_reward")]
    assert sorted(tools) == sorted(s["function"]["name"] for s in TOOL_SCHEMAS)
    assert not [k for k, v in vars(SandboxEnv).items() if isinstance(v, (dict, list, set))]  # no class-level state
    env = SandboxEnvFactory({}, None)()

    def flat(props):  # what a signature can say of a property: its type and description
        return {k: {"type": v["type"], **({"description": v["description"]} if "description" in v else {})}
                for k, v in props.items()}

    for s in TOOL_SCHEMAS:
        fn = s["function"]
        got = get_json_schema(getattr(env, fn["name"]))["function"]
        assert got["name"] == fn["name"] and got["description"] == fn["description"]
        assert list(got["parameters"]["properties"]) == list(fn["parameters"]["properties"])
        assert flat(got["parameters"]["properties"]) == flat(fn["parameters"]["properties"])
        assert sorted(got["parameters"].get("required", [])) == sorted(fn["parameters"]["required"])
        assert getattr(env, fn["name"]).tool_schema == s
    assert "Not run: no sandbox" in env.ls(".")

    tok = grpo_tokenizer(str(make_tiny_model(tmp_path / "tiny", hidden_size=32, num_layers=1)))
    msgs = [{"role": "user", "content": "hi"}]
    methods = [getattr(env, s["function"]["name"]) for s in TOOL_SCHEMAS]
    for tokenize in (False, True):
        assert tok.apply_chat_template(msgs, tools=methods, tokenize=tokenize, add_generation_prompt=True) == \
            tok.apply_chat_template(msgs, tools=TOOL_SCHEMAS, tokenize=tokenize, add_generation_prompt=True)
    text = tok.apply_chat_template(msgs, tools=methods, tokenize=False)
    assert '"additionalProperties": false' in text and '"required": ["oldText", "newText"]' in text


def test_grpo_tiny_cpu_run_rewards_from_verifier(tmp_path):
    from clawgym.tasks.model import File, Task, Verifier
    from clawgym.train.base_model import make_tiny_model
    from clawgym.train.grpo import GRPORunConfig, run_grpo

    tasks = [Task(task_id=f"sum-{i}",
                  instruction=f"Write the sum of the numbers in input/data.txt to output/answer.txt ({i})",
                  files=[File(path="input/data.txt", content=b"1 2 3\n")], verifier=Verifier(kind="grade", code=GRADE))
             for i in range(2)]
    base = make_tiny_model(tmp_path / "tiny", hidden_size=32, num_layers=1)
    cfg = GRPORunConfig(base_model=str(base), output_dir=str(tmp_path / "grpo"), score_workers=2,
                        grpo_config={"num_generations": 2, "per_device_train_batch_size": 2, "max_steps": 2,
                                     "learning_rate": 1e-4, "max_completion_length": 12,
                                     "max_tool_calling_iterations": 1, "seed": 0})
    row = run_grpo(cfg, tasks, _factory()).to_dict()
    assert row["algorithm"] == "grpo" and row["hyperparams"]["grpo_config"]["learning_rate"] == 1e-4
    assert row["steps"] == 2
    assert row["n_sandboxes"] == 4 == len(row["rewards"])  # one fresh sandbox per sample: 2 steps × 2 samples
    # the random model writes no answer: the verifier gives exactly 2 of 3 checks (input intact, completion seen)
    assert all(r["reward"] == pytest.approx(2 / 3) for r in row["rewards"])
    assert {r["task_id"] for r in row["rewards"]} <= {"sum-0", "sum-1"}
    assert row["reward_curve"] and all(c["reward"] == pytest.approx(2 / 3) for c in row["reward_curve"])
    assert (tmp_path / "grpo" / "model.safetensors").exists()


def test_vllm_server_mode_is_the_embedded_engine_where_trl_can_sync_weights(tmp_path):
    """use_vllm + vllm_mode "server" without a server of the user's own: run_grpo serves the checkpoint itself (True
    where CUDA is); on a machine without CUDA (TRL syncs weights over NCCL only) it is refused naming the field,
    before any model loads; colocate, off, or the user's own server: not ours to start."""
    from clawgym.train.config import TrainConfigError
    from clawgym.train.grpo import GRPORunConfig, run_grpo, vllm_server_mode

    server = {"use_vllm": True, "vllm_mode": "server"}
    assert vllm_server_mode(server, cuda=True) is True
    with pytest.raises(TrainConfigError, match="grpo_config: use_vllm with vllm_mode='server'.*CUDA"):
        vllm_server_mode(server, cuda=False)
    assert not vllm_server_mode({"use_vllm": False, "vllm_mode": "server"}, cuda=False)
    assert not vllm_server_mode({"use_vllm": True, "vllm_mode": "colocate"}, cuda=True)
    assert not vllm_server_mode({**server, "vllm_server_base_url": "http://gpu-box:8000"}, cuda=False)
    assert not vllm_server_mode({**server, "vllm_server_host": "10.0.0.5"}, cuda=False)
    import torch

    if not torch.cuda.is_available():
        out = tmp_path / "out"
        with pytest.raises(TrainConfigError, match="needs a CUDA device"):
            run_grpo(GRPORunConfig(base_model=str(tmp_path / "no-model"), output_dir=str(out), grpo_config=server),
                     [], factory=None)
        assert not out.exists()  # refused before anything was written or loaded


def test_an_infra_failure_of_the_reward_is_neutral_not_a_crash_or_a_zero():
    """A room that fails (SandboxError) must not end the TRL run nor score the sample 0: the sample gets its
    group's mean (advantage ~0) and the log names the failure; a sample the agent broke still scores."""
    from clawgym.sandbox.base import SandboxError
    from clawgym.tasks.model import File, Task, Verifier
    from clawgym.train.grpo import SandboxEnvFactory, make_reward_func, neutral_rewards

    task = Task(task_id="sum-1", instruction="Write the sum of input/data.txt to output/answer.txt",
                files=[File(path="input/data.txt", content=b"1 2 3\n")], verifier=Verifier(kind="grade", code=GRADE))
    real = _factory()

    class BrokenRooms:  # the agents' sandboxes work; the room the check would run in cannot start
        def open(self, files):
            return real.open(files)

        def rooms(self):
            raise SandboxError("room engine down")

    good, broken = SandboxEnvFactory({task.task_id: task}, real), SandboxEnvFactory({task.task_id: task}, BrokenRooms())
    envs = [good(), broken(), good()]
    for e in envs:
        e.reset(task_id="sum-1")
    envs[0].write("output/answer.txt", "6\n")
    envs[1].write("output/answer.txt", "6\n")
    envs[2].exec(command="rm -rf /root/.openclaw/workspace/input")  # the agent's own damage: scored, not infra
    log: list = []
    done = [{"role": "assistant", "content": "done"}]
    rewards = make_reward_func(2, log)(None, [done] * 3, environments=envs, task_id=["sum-1"] * 3)
    assert rewards[0] == pytest.approx(1.0)
    assert rewards[2] < 1.0
    assert rewards[1] == pytest.approx((rewards[0] + rewards[2]) / 2)  # the group's mean, not 0 and not raised
    assert "room engine down" in log[1]["infra"] and "infra" not in log[0] and "infra" not in log[2]
    assert all(e.sandbox is None for e in envs)  # every sandbox closed, the failed one too
    assert neutral_rewards([None, None, 0.5], ["a", "a", "b"]) == [0.0, 0.0, 0.5]
