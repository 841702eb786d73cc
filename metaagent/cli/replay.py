"""`metaagent-replay`: Replay and analyse recorded rollouts."""

from ._stub import stub


def main() -> None:
    stub("metaagent-replay", "Replay and analyse recorded rollouts.")


if __name__ == "__main__":
    main()
