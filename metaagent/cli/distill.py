"""`metaagent-distill`: Distil designer and executor SFT data from a teacher model."""

from ._stub import stub


def main() -> None:
    stub("metaagent-distill", "Distil designer and executor SFT data from a teacher model.")


if __name__ == "__main__":
    main()
