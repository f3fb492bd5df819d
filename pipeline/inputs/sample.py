"""The built-in sample competition: Kaggle's file names and columns, small, deterministic, learnable.

Comments are drawn from per-language word lists; a toxic comment carries insults of its language,
with some label noise and some insults in non-toxic comments, so a model learns something real but
not everything. Every language of the real data is present: English train, es/it/tr validation,
es/fr/it/pt/ru/tr test, and a translated train file in the shape top solutions trained on. The test
labels (test_labels.csv: id, toxic, as the competition published them) are drawn like the validation's.
"""

from __future__ import annotations

import random
from pathlib import Path

import pandas as pd

from pipeline.files import atomic_dir, check_free_space, write_csv

NEUTRAL = {
    "en": "the article page source edit thanks please talk section wiki history link added reference "
    "removed image discussion think agree article's facts book city music film team season year".split(),
    "es": "el artículo página fuente editar gracias por favor discusión sección historia enlace referencia "
    "imagen creo acuerdo libro ciudad música película equipo temporada año datos".split(),
    "it": "la voce pagina fonte modifica grazie per favore discussione sezione storia collegamento "
    "immagine penso accordo libro città musica film squadra stagione anno dati".split(),
    "tr": "makale sayfa kaynak düzenleme teşekkürler lütfen tartışma bölüm tarih bağlantı kaynakça "
    "resim bence katılıyorum kitap şehir müzik film takım sezon yıl bilgi ılık".split(),
    "fr": "l'article page source modifier merci s'il vous plaît discussion section histoire lien "
    "référence image je pense d'accord livre ville musique film équipe saison année".split(),
    "pt": "o artigo página fonte editar obrigado por favor discussão seção história ligação "
    "referência imagem acho acordo livro cidade música filme equipe temporada ano".split(),
    "ru": "статья страница источник правка спасибо пожалуйста обсуждение раздел история ссылка "
    "изображение думаю согласен книга город музыка фильм команда сезон год".split(),
}

TOXIC = {
    "en": "idiot stupid moron loser pathetic dumb trash ugly shut-up hate".split(),
    "es": "idiota estúpido imbécil perdedor patético tonto basura feo cállate odio".split(),
    "it": "idiota stupido cretino perdente patetico scemo schifo brutto stai-zitto odio".split(),
    "tr": "aptal salak gerizekalı ezik zavallı mal çöp çirkin kapa-çeneni nefret".split(),
    "fr": "idiot stupide crétin perdant pathétique débile ordure moche tais-toi haine".split(),
    "pt": "idiota estúpido imbecil perdedor patético burro lixo feio cala-boca ódio".split(),
    "ru": "идиот тупой дурак неудачник жалкий придурок мусор урод заткнись ненавижу".split(),
}

# rows at scale 1.0
SIZES = {"train": 1500, "bias": 400, "valid_per_lang": 300, "test_per_lang": 150, "translated_per_lang": 150}
LABELS = ["toxic", "severe_toxic", "obscene", "threat", "insult", "identity_hate"]
BIAS_LABELS = ["toxic", "severe_toxicity", "obscene", "identity_attack", "insult", "threat"]
FILES = (
    "jigsaw-toxic-comment-train.csv",
    "jigsaw-unintended-bias-train.csv",
    "validation.csv",
    "test.csv",
    "sample_submission.csv",
    "translated-train.csv",
    "test_labels.csv",
)


def comment(rng: random.Random, lang: str, toxic: bool) -> str:
    """One comment: neutral words, plus insults when toxic; sometimes quotes and newlines, like real ones."""
    words = rng.choices(NEUTRAL[lang], k=rng.randint(4, 30))
    n_bad = rng.randint(1, 3) if toxic else int(rng.random() < 0.08)  # a few clean comments quote an insult
    for _ in range(n_bad):
        words.insert(rng.randrange(len(words) + 1), rng.choice(TOXIC[lang]))
    text = " ".join(words)
    if rng.random() < 0.1:
        text = f'"{text}," he said'
    if rng.random() < 0.1:
        cut = rng.randrange(len(text))
        text = text[:cut] + "\n\n" + text[cut:]
    return text


def _labelled(rng: random.Random, lang: str, rate: float, noise: float = 0.05) -> tuple[str, int]:
    toxic = rng.random() < rate
    text = comment(rng, lang, toxic)
    if rng.random() < noise:  # label noise, as in the real annotations
        toxic = not toxic
    return text, int(toxic)


def make_frames(seed: int = 0, scale: float = 1.0) -> dict[str, pd.DataFrame]:
    rng = random.Random(seed)
    n = {k: max(10, int(v * scale)) for k, v in SIZES.items()}

    rows = []
    for _ in range(n["train"]):
        text, y = _labelled(rng, "en", 0.10)
        extra = [int(y and rng.random() < p) for p in (0.1, 0.5, 0.03, 0.5, 0.1)]
        rows.append([f"{rng.getrandbits(64):016x}", text, y, *extra])
    train = pd.DataFrame(rows, columns=["id", "comment_text", *LABELS])

    rows = []
    for i in range(n["bias"]):
        text, y = _labelled(rng, "en", 0.08)
        score = round(rng.uniform(0.5, 1.0) if y else rng.uniform(0.0, 0.45), 6)
        rows.append([239579 + i, text, score, *(round(score * rng.random(), 6) for _ in BIAS_LABELS[1:])])
    bias = pd.DataFrame(rows, columns=["id", "comment_text", *BIAS_LABELS])

    rows = []
    for lang in ("es", "it", "tr"):
        for _ in range(n["valid_per_lang"]):
            text, y = _labelled(rng, lang, 0.15)
            rows.append([text, lang, y])
    rng.shuffle(rows)
    valid = pd.DataFrame([[i, *r] for i, r in enumerate(rows)], columns=["id", "comment_text", "lang", "toxic"])

    rows = []
    # The test labels get the validation's 5% label noise from a generator of their own, so that test.csv
    # and every file after it are the same as before the labels existed.
    noise = random.Random(seed + 1)
    for lang in ("es", "fr", "it", "pt", "ru", "tr"):
        for _ in range(n["test_per_lang"]):
            toxic = rng.random() < 0.15
            rows.append([comment(rng, lang, toxic), lang, int(toxic != (noise.random() < 0.05))])
    rng.shuffle(rows)
    test = pd.DataFrame([[i, *r] for i, r in enumerate(rows)], columns=["id", "content", "lang", "toxic"])
    labels = test[["id", "toxic"]]
    test = test.drop(columns="toxic")
    submission = pd.DataFrame({"id": test["id"], "toxic": 0.5})

    rows = []
    for lang in ("en", "es", "fr", "it", "pt", "ru", "tr"):
        for _ in range(n["translated_per_lang"]):
            text, y = _labelled(rng, lang, 0.5)
            rows.append([text, lang, y])
    translated = pd.DataFrame(rows, columns=["comment_text", "lang", "toxic"])

    return dict(zip(FILES, (train, bias, valid, test, submission, translated, labels), strict=True))


def write(dest: Path, seed: int = 0, scale: float = 1.0) -> list[Path]:
    """Write the sample competition into `dest` (a new folder, complete or absent)."""
    frames = make_frames(seed, scale)
    check_free_space(
        Path(dest).parent, sum(int(f.memory_usage(deep=True).sum()) for f in frames.values()), "the sample"
    )
    with atomic_dir(dest) as tmp:
        for name, frame in frames.items():
            write_csv(tmp / name, frame)
    return [dest / name for name in FILES]
