"""What the Trainer exchanges with the pieces around it: ``checkpoint_connector``
(the Trainer's side of a checkpoint: resolving ``ckpt_path``, saving and restoring)."""
