"""The stepping of one episode: its state, its tools, the errors its API answers, and the recorder of its steps."""
