"""Tests of the model layer: masking (causal, prefix, padding), head, tying, errors, checkpointing."""

import pytest
import torch

from selfsup.models import MODEL_NAMES, build_model
from selfsup.models.kv_cache import KVCache

V, L, B = 100, 12, 3
TINY = dict(vocab_size=V, max_len=16, d_model=32, n_layers=2, n_heads=4)
ATOL = 1e-6


def make(name, **kw):
    torch.manual_seed(0)
    return build_model(name, **{**TINY, **kw}).eval()


def ids(b=B, length=L, seed=1):
    return torch.randint(0, V, (b, length), generator=torch.Generator().manual_seed(seed))


def changed_at(x, pos, shift=1):
    y = x.clone()
    y[:, pos] = (y[:, pos] + shift) % V
    return y


def differs(a, b):
    """[B, L, d] outputs -> bool [L]: does any batch/feature entry at that position differ?"""
    return ((a - b).abs() > ATOL).any(-1).any(0)


# --- causal / bidirectional ----------------------------------------------------------------


@torch.no_grad()
def test_decoder_is_causal_encoder_is_not():
    x = ids()
    dec, enc = make("decoder"), make("encoder")
    for t in range(1, L):
        y = changed_at(x, t)
        d = differs(dec(decoder_inputs=x), dec(decoder_inputs=y))
        assert not d[:t].any(), f"decoder position < {t} saw token {t}"
        assert d[t:].all()
        e = differs(enc(encoder_inputs=x), enc(encoder_inputs=y))
        assert e.all(), "encoder is bidirectional: every position should see token t"


@torch.no_grad()
def test_decoder_prefix_lm():
    x = ids()
    dec = make("decoder")
    p = 5
    prefix = torch.full((B,), p)
    out = dec(decoder_inputs=x, prefix_length=prefix)
    # a token inside the prefix (the last one) is seen by every position, including position 0
    d = differs(out, dec(decoder_inputs=changed_at(x, p - 1), prefix_length=prefix))
    assert d.all()
    # a token after the prefix is not seen by the prefix nor by earlier positions: causal after p
    for t in range(p, L):
        d = differs(out, dec(decoder_inputs=changed_at(x, t), prefix_length=prefix))
        assert not d[:t].any() and d[t:].all(), t
    # prefix_length 0 is plain causal; the prefix mask differs per row
    assert torch.allclose(
        dec(decoder_inputs=x, prefix_length=torch.zeros(B, dtype=torch.long)), dec(decoder_inputs=x), atol=ATOL
    )
    per_row = torch.tensor([0, 3, L])
    y = changed_at(x, 2)
    a, b = dec(decoder_inputs=x, prefix_length=per_row), dec(decoder_inputs=y, prefix_length=per_row)
    row_changed_at_0 = ((a - b).abs() > ATOL)[:, 0].any(-1)
    assert row_changed_at_0.tolist() == [False, True, True]


# --- encoder padding ----------------------------------------------------------------------


@pytest.mark.parametrize("positions", ["learned", "relative"])
@torch.no_grad()
def test_encoder_positions_give_those_states_alone(positions):
    """positions= (one per row) computes the last block at them only: the full forward's states there."""
    x = ids()
    mask = torch.ones(B, L, dtype=torch.bool)
    mask[1, 5:] = False
    enc = make("encoder", n_layers=3, positions=positions)
    picked = torch.tensor([0, 4, L - 1])
    full = enc(encoder_inputs=x, encoder_mask=mask)[torch.arange(B), picked]
    assert torch.allclose(enc(encoder_inputs=x, encoder_mask=mask, positions=picked), full, atol=ATOL)
    with pytest.raises(ValueError, match="causal"):
        make("decoder").decoder(torch.zeros(1, 3, TINY["d_model"]), is_causal=True, query=torch.tensor([0]))


@pytest.mark.parametrize("positions", ["learned", "relative"])
@torch.no_grad()
def test_masked_copies_share_their_first_block_projection_and_give_the_full_forward_states(positions):
    """A pseudo-log-likelihood's masked copies (a sentence's rows equal but at one position): same_inputs finds
    each distinct (token, position) once, and the positions= path that projects only those gives the full
    forward's states."""
    from selfsup.models.transformer import same_inputs

    sentence = ids()[0]
    copies = sentence.repeat(L, 1)
    copies[torch.arange(L), torch.arange(L)] = 3  # the mask token at each position in turn
    one, each = same_inputs(copies)
    assert len(one) == 2 * L - int((sentence == 3).sum())  # the sentence's tokens and the mask, at each position
    assert torch.equal(copies.view(-1)[one][each], copies.view(-1))
    assert torch.equal(one[each] % L, torch.arange(L * L) % L)  # each row read from one at its own position
    enc = make("encoder", n_layers=2, positions=positions)
    mask = torch.ones(L, L, dtype=torch.bool)
    full = enc(encoder_inputs=copies, encoder_mask=mask)[torch.arange(L), torch.arange(L)]
    assert torch.allclose(enc(encoder_inputs=copies, encoder_mask=mask, positions=torch.arange(L)), full, atol=ATOL)


@torch.no_grad()
def test_encoder_padding_is_invisible():
    x = ids()
    mask = torch.ones(B, L, dtype=torch.bool)
    mask[0, 7:] = False
    mask[1, 2:] = False
    mask[2, 0] = False  # a masked key need not be at the end
    garbled = torch.where(mask, x, (x + 17) % V)
    enc = make("encoder")
    a, b = enc(encoder_inputs=x, encoder_mask=mask), enc(encoder_inputs=garbled, encoder_mask=mask)
    assert torch.allclose(a[mask], b[mask], atol=ATOL)
    assert torch.isfinite(a).all()
    ed = make("encoder_decoder")
    d = ids(length=6, seed=2)
    a = ed(encoder_inputs=x, decoder_inputs=d, encoder_mask=mask)
    b = ed(encoder_inputs=garbled, decoder_inputs=d, encoder_mask=mask)
    assert torch.allclose(a, b, atol=ATOL)
    # without the mask the garbled tokens are seen
    assert not torch.allclose(
        ed(encoder_inputs=x, decoder_inputs=d), ed(encoder_inputs=garbled, decoder_inputs=d), atol=ATOL
    )


@torch.no_grad()
def test_all_padding_row_is_finite_and_reads_nothing():
    x = ids()
    mask = torch.ones(B, L, dtype=torch.bool)
    mask[1] = False
    for name in ("encoder", "encoder_decoder"):
        m = make(name)
        kw = dict(encoder_inputs=x, decoder_inputs=ids(length=5, seed=3), encoder_mask=mask)
        a = m(**kw)
        b = m(**{**kw, "encoder_inputs": (x + 5) % V})
        assert torch.isfinite(a).all(), name
        if name == "encoder_decoder":  # the decoder reads nothing from an all-padding encoder row
            assert torch.allclose(a[1], b[1], atol=ATOL)


# --- encoder-decoder ------------------------------------------------------------------------


@torch.no_grad()
def test_encoder_decoder_causal_in_decoder_and_reads_encoder():
    m = make("encoder_decoder", n_decoder_layers=3)
    assert len(m.decoder.blocks) == 3 and len(m.encoder.blocks) == 2
    x, d = ids(), ids(length=8, seed=2)
    out = m(encoder_inputs=x, decoder_inputs=d)
    assert out.shape == (B, 8, 32)
    for t in range(1, 8):
        diff = differs(out, m(encoder_inputs=x, decoder_inputs=changed_at(d, t)))
        assert not diff[:t].any() and diff[t:].all(), t
    diff = differs(out, m(encoder_inputs=changed_at(x, L - 1), decoder_inputs=d))
    assert diff.all(), "every decoder position should see the last encoder token"


# --- incremental decoding (key/value cache) ------------------------------------------------


@pytest.mark.parametrize("positions", ["learned", "relative"])
@pytest.mark.parametrize("name", ["decoder", "encoder_decoder"])
@torch.no_grad()
def test_decode_through_a_cache_gives_forwards_states(name, positions):
    """Right-padded prompts of several lengths in one decode call, then a token per row per call at the row's own
    position: each state is the full forward's at that position of the row's stream; the encoder runs once, each
    layer's cross-attention keys and values are projected once."""
    m = make(name, positions=positions)
    x, lengths, width = ids(), torch.tensor([3, 7, 5]), 7
    mask = torch.ones(B, 9, dtype=torch.bool)
    mask[1, 6:] = False
    inputs = {} if name == "decoder" else dict(encoder_inputs=ids(length=9, seed=2), encoder_mask=mask)
    full = m(decoder_inputs=x, **inputs)
    prompt = x[:, :width].clone()
    for row, n in enumerate(lengths):
        prompt[row, n:] = 0  # padding, overwritten by the row's next tokens and never read
    cache, runs = KVCache(m.max_len), []
    if name == "encoder_decoder":
        m.encoder.register_forward_hook(lambda *_: runs.append(1))
    states = m.decode(prompt, torch.arange(width).expand(B, -1), cache, **inputs)
    for row, n in enumerate(lengths):
        torch.testing.assert_close(states[row, :n], full[row, :n], atol=1e-5, rtol=0)
    if name == "encoder_decoder":  # read no more: each layer's cross-attention keys and values are kept
        cache.memory[0].fill_(float("nan"))
    rows = torch.arange(B)
    for t in range(L - width):
        at = lengths + t
        states = m.decode(x[rows, at][:, None], at[:, None], cache, **inputs)
        torch.testing.assert_close(states[:, 0], full[rows, at], atol=1e-5, rtol=0)
    crossed = name == "encoder_decoder"
    assert len(runs) == crossed and len(cache.kv) == len(m.decoder.blocks) * (1 + crossed)
    # training's forward takes no cache: the same states as before decoding
    torch.testing.assert_close(m(decoder_inputs=x, **inputs), full, atol=0, rtol=0)


# --- common signature -----------------------------------------------------------------------


@torch.no_grad()
def test_common_keyword_signature_and_missing_inputs():
    x, d = ids(), ids(length=6, seed=2)
    full = dict(
        encoder_inputs=x,
        decoder_inputs=d,
        encoder_mask=torch.ones(B, L, dtype=torch.bool),
        prefix_length=torch.full((B,), 2),
    )
    assert make("encoder")(**full).shape == (B, L, 32)
    assert make("decoder")(**full).shape == (B, 6, 32)
    assert make("encoder_decoder")(**full).shape == (B, 6, 32)
    with pytest.raises(ValueError, match="needs encoder_inputs"):
        make("encoder")(decoder_inputs=d)
    with pytest.raises(ValueError, match="needs decoder_inputs"):
        make("decoder")(encoder_inputs=x)
    # an encoder-decoder given only encoder inputs returns its encoder's states (features of the text)
    encdec = make("encoder_decoder")
    assert torch.equal(encdec(encoder_inputs=x), encdec.encoder(encdec.tok_emb(x)))
    # positional use matches each assembly's natural signature
    assert torch.equal(make("decoder")(d), make("decoder")(decoder_inputs=d))
    assert torch.equal(make("encoder")(x), make("encoder")(encoder_inputs=x))


# --- head, vocab padding, tying ---------------------------------------------------------------


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_head_is_padded_and_padding_gets_no_probability(name):
    m = make(name)
    assert m.vocab_size == V and m.padded_vocab_size == 128
    h = m(encoder_inputs=ids(), decoder_inputs=ids())
    scored = torch.zeros(B, L, dtype=torch.bool)
    scored[0, 3] = scored[2, 5] = True
    logits = m.head(h[scored])  # sparse head
    assert logits.shape == (2, 128)
    probs = logits.softmax(-1)
    assert (probs[:, V:] == 0).all()
    assert torch.allclose(probs[:, :V].sum(-1), torch.ones(2))
    loss = torch.nn.functional.cross_entropy(logits, torch.tensor([1, 2]))
    assert torch.isfinite(loss)
    loss.backward()
    assert all(torch.isfinite(p.grad).all() for p in m.parameters() if p.grad is not None)


def test_vocab_already_a_multiple_of_64_is_not_padded():
    m = build_model("decoder", vocab_size=128, max_len=8, d_model=32, n_layers=1, n_heads=4)
    assert m.padded_vocab_size == 128 and m.tok_emb.weight.shape[0] == 128
    assert build_model("decoder", vocab_size=129, max_len=8, d_model=32, n_layers=1, n_heads=4).padded_vocab_size == 192


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_tied_embeddings_and_parameter_count(name):
    tied, untied = make(name), make(name, tie_embeddings=False)
    assert tied.lm_head.weight is tied.tok_emb.weight
    assert tied.lm_head.weight.data_ptr() == tied.tok_emb.weight.data_ptr()
    assert untied.lm_head.weight.data_ptr() != untied.tok_emb.weight.data_ptr()
    unique = {p.data_ptr(): p.numel() for p in tied.state_dict().values() if p.is_floating_point()}
    assert tied.num_parameters() == sum(unique.values())
    assert untied.num_parameters() - tied.num_parameters() == 128 * 32


def test_init_scales_residual_projections():
    m = build_model("decoder", vocab_size=V, max_len=16, d_model=256, n_layers=8, n_heads=4)
    block = m.decoder.blocks[0]
    assert abs(block.attn.qkv.weight.std().item() - 0.02) < 2e-3
    assert abs(block.attn.proj.weight.std().item() - 0.02 / 4) < 5e-4
    assert abs(block.mlp.proj.weight.std().item() - 0.02 / 4) < 5e-4
    assert block.mlp.fc.bias.abs().max() == 0


# --- errors -------------------------------------------------------------------------------


def test_bad_arguments_raise_helpful_errors():
    with pytest.raises(
        ValueError, match="architecture.name=gpt is unknown: use one of encoder, decoder, encoder_decoder"
    ):
        build_model("gpt", vocab_size=V, max_len=16)
    with pytest.raises(ValueError, match="architecture.activation=swish is unknown: use one of gelu, relu"):
        build_model("encoder", vocab_size=V, max_len=16, activation="swish")
    with pytest.raises(ValueError, match="architecture.n_layers=0 must be at least 1"):
        build_model("encoder", vocab_size=V, max_len=16, n_layers=0)
    with pytest.raises(ValueError, match="d_model=30 is not divisible by n_heads=4"):
        build_model("encoder", vocab_size=V, max_len=16, d_model=30, n_heads=4)
    for name in MODEL_NAMES:
        m = make(name)
        with pytest.raises(ValueError, match=r"length 17 > max_len=16.*raise max_len"):
            m(encoder_inputs=ids(length=17), decoder_inputs=ids(length=17 if name == "decoder" else 4))
    with pytest.raises(ValueError, match=r"decoder_inputs has length 17"):
        make("encoder_decoder")(encoder_inputs=ids(length=4), decoder_inputs=ids(length=17))


# --- activation checkpointing ----------------------------------------------------------------


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_activation_checkpointing_matches(name):
    kw = dict(
        encoder_inputs=ids(),
        decoder_inputs=ids(length=7, seed=2),
        encoder_mask=torch.arange(L)[None, :].expand(B, L) < torch.tensor([[L], [5], [9]]),
        prefix_length=torch.tensor([0, 3, 6]),
    )
    results = []
    for ckpt in (False, True):
        m = make(name, activation_checkpointing=ckpt, dropout=0.1).train()
        torch.manual_seed(123)  # same dropout masks (non-reentrant checkpoint replays the RNG)
        out = m(**kw)
        m.head(out).logsumexp(-1).mean().backward()
        results.append((out.detach(), {n: p.grad.clone() for n, p in m.named_parameters()}))
    (o1, g1), (o2, g2) = results
    assert torch.allclose(o1, o2, atol=1e-6)
    assert g1.keys() == g2.keys()
    for n in g1:
        assert torch.allclose(g1[n], g2[n], atol=1e-6), n


def reference_attention(attn, x, context, causal):
    """Multi-head attention written out from the query/key/value rows of attn.qkv."""
    D, H = x.shape[-1], attn.n_heads
    w, b = attn.qkv.weight, attn.qkv.bias
    q, k, v = x @ w[:D].t() + b[:D], context @ w[D : 2 * D].t() + b[D : 2 * D], context @ w[2 * D :].t() + b[2 * D :]
    split = lambda t: t.view(t.shape[0], t.shape[1], H, D // H).transpose(1, 2)  # noqa: E731
    scores = split(q) @ split(k).transpose(-1, -2) / (D // H) ** 0.5
    if causal:
        scores = scores.masked_fill(torch.ones(x.shape[1], context.shape[1]).triu(1).bool(), float("-inf"))
    y = (scores.softmax(-1) @ split(v)).transpose(1, 2).reshape(x.shape)
    return attn.proj(y)


def test_one_qkv_projection_serves_self_and_cross_attention():
    torch.manual_seed(0)
    m = make("encoder_decoder")
    attn, cross = m.decoder.blocks[0].attn, m.decoder.blocks[0].cross_attn
    x, memory = torch.randn(2, 5, 32), torch.randn(2, 7, 32)
    torch.testing.assert_close(attn(x, is_causal=True), reference_attention(attn, x, x, causal=True))
    torch.testing.assert_close(attn(x), reference_attention(attn, x, x, causal=False))
    torch.testing.assert_close(cross(x, context=memory), reference_attention(cross, x, memory, causal=False))


def test_t5_style_blocks_relu_and_no_biases():
    m = make("encoder_decoder", activation="relu", bias=False)
    assert not [name for name, _ in m.named_parameters() if name.endswith("bias")]
    with_bias = make("encoder_decoder")
    n_bias = sum(p.numel() for name, p in with_bias.named_parameters() if name.endswith("bias"))
    assert with_bias.num_parameters() - m.num_parameters() == n_bias > 0
    mlp, x = m.encoder.blocks[0].mlp, torch.randn(2, 3, 32)
    torch.testing.assert_close(mlp(x), mlp.proj(torch.relu(mlp.fc(x))))
    # the decoder stays causal: changing later decoder tokens leaves earlier outputs unchanged
    enc, dec = ids(seed=1), ids(length=6, seed=2)
    later = dec.clone()
    later[:, 3:] = (later[:, 3:] + 1) % V
    a = m(encoder_inputs=enc, decoder_inputs=dec)
    b = m(encoder_inputs=enc, decoder_inputs=later)
    torch.testing.assert_close(a[:, :3], b[:, :3], atol=ATOL, rtol=0)
    assert not torch.allclose(a[:, 3:], b[:, 3:])
    with pytest.raises(ValueError, match="architecture.activation=swish is unknown"):
        make("encoder", activation="swish")
