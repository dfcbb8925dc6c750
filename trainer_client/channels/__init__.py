"""The two channels beside RLVR: SDPO from the hint-conditioned self, and DPO on replay pairs."""
