"""What several lessons' exercises forbid: the course's own attention, and the library softmax."""

NO_MHA = ("mha", "torch.nn.functional.scaled_dot_product_attention",
          "torch.nn.MultiheadAttention", "torch.nn.functional.multi_head_attention_forward")

NO_SOFTMAX = ("mha", "torch.softmax", "torch.nn.functional.softmax", "torch.Tensor.softmax",
              "torch.special.softmax", "torch.log_softmax", "torch.nn.functional.log_softmax",
              "torch.Tensor.log_softmax", "torch.special.log_softmax", "torch.logsumexp",
              "torch.Tensor.logsumexp", "torch.special.logsumexp", "torch.distributions")
