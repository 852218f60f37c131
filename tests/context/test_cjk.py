"""Chinese (and Japanese, Korean) text: sentences without spaces, words inside a run."""

from __future__ import annotations

import sqlite3

import pytest

from ctxbus.agents.context import LocalContext
from ctxbus.agents.context._archive import ARCHIVE_SCHEMA
from ctxbus.agents.context._classify import split_units
from tests.context.conftest import MakeContext

_FILLER = (
    "我们今天检查了整个部署流程，发现测试环境的配置和生产环境基本一致，日志也都正常输出。"
    "数据迁移脚本已经在预发布环境跑过两次，没有发现任何问题，耗时大约十五分钟。"
)


@pytest.mark.parametrize(
    ("text", "units"),
    [
        ("第一句。第二句！第三句？", ["第一句。", "第二句！", "第三句？"]),
        ("他说：“好的。”然后走了。真的吗？！是的。", ["他说：“好的。”", "然后走了。", "真的吗？！", "是的。"]),
        ("好。 下一句", ["好。", "下一句"]),
        ("Done.Next one. OK!Fine? yes", ["Done.Next one.", "OK!Fine?", "yes"]),
    ],
)
def test_sentences_end_straight_after_cjk_enders(text: str, units: list[str]) -> None:
    assert split_units(text) == units


def test_a_long_chinese_message_pins_only_its_constraint_sentence(make_ctx: MakeContext) -> None:
    ctx = make_ctx()
    text = _FILLER + "注意：周五下午不要发布新版本。" + "另外监控面板上的延迟曲线看起来比上周平稳很多。" + _FILLER
    tag = ctx.add("user", text, importance=0.5)
    assert ctx.message(tag).tokens > ctx.config.constraint_whole_max, "precondition: too long to pin whole"
    pinned = next(view for view in ctx.inspect() if view.name == "pinned")
    assert [(item.kind, item.text) for item in pinned.items] == [
        ("constraint", f"§{tag}§ 注意：周五下午不要发布新版本。")
    ]


def _corpus(ctx: LocalContext) -> list[int]:
    return [
        ctx.add("user", "记住：不要删除生产数据库。"),
        ctx.add("tool", "部署失败：连接数据库超时 while running deploy.sh", tool_name="sh"),
        ctx.add("tool", "ok\x00 then 部署完成", tool_name="sh"),
        ctx.add("assistant", "データベース接続に失敗しました。데이터베이스에 연결할 수 없습니다."),
    ]


def test_search_finds_cjk_words_inside_a_run(make_ctx: MakeContext) -> None:
    ctx = make_ctx()
    keep, failed, done, other = _corpus(ctx)
    assert [(h.tag, h.snippet) for h in ctx.search("数据库")] == [
        (keep, "记住：不要删除生产[数据库]。"),
        (failed, "部署失败：连接[数据库]超时 while running deploy.sh"),
    ]
    assert [h.tag for h in ctx.search("删除")] == [keep]
    snippets = {h.tag: h.snippet for h in ctx.search("部署")}
    assert snippets.keys() == {failed, done}, "found even past a NUL"
    assert snippets[failed].startswith("[部署]失败"), "the snippet marks the word, in the text as written"
    assert [h.tag for h in ctx.search("数据库连接")][0] == failed, "the more pairs match, the higher"
    assert [h.tag for h in ctx.search("データ")] == [other]
    assert [h.tag for h in ctx.search("데이터")] == [other]
    assert [h.tag for h in ctx.search("deploy")] == [failed], "words next to CJK text are still words"
    assert ctx.search("库") and ctx.search("员") == []


def test_english_is_indexed_and_ranked_exactly_as_before(make_ctx: MakeContext) -> None:
    ctx = make_ctx()
    texts = [
        "The flaky test is test_payment_refund in billing/tests/test_refund.py.",
        "Refund handling: the refund queue retries three times, then gives up on the refund.",
        "Unrelated chatter about formatting, naming and café opening hours.",
        "ERROR: the refund worker crashed with a KeyError in billing/worker.py",
    ]
    tags = [ctx.add("assistant", text) for text in texts]
    plain = sqlite3.connect(":memory:")
    plain.execute("CREATE TABLE messages (tag INTEGER PRIMARY KEY, content TEXT)")
    plain.executescript(ARCHIVE_SCHEMA)
    plain.executemany("INSERT INTO messages VALUES (?, ?)", zip(tags, texts, strict=True))
    plain.execute("INSERT INTO archive_fts(archive_fts) VALUES ('rebuild')")
    for query in ("refund", "billing worker crashed", "cafe"):
        match = " OR ".join(f'"{word}"' for word in query.split())
        expected = plain.execute(
            "SELECT rowid, -bm25(archive_fts) FROM archive_fts WHERE archive_fts MATCH ? ORDER BY bm25(archive_fts), rowid",
            (match,),
        ).fetchall()
        assert [(h.tag, h.score) for h in ctx.search(query, limit=10)] == expected
    plain.close()


def test_a_store_indexed_before_cjk_splitting_is_indexed_again(make_ctx: MakeContext) -> None:
    ctx = make_ctx("old.db")
    keep, failed, *_ = _corpus(ctx)
    assert ctx.search("deploy")
    path = ctx._store.path
    ctx.close()
    with sqlite3.connect(path) as old:  # the index as the build before this one wrote it
        old.execute("INSERT INTO archive_fts(archive_fts) VALUES ('delete-all')")
        old.execute("INSERT INTO archive_fts(rowid, content) SELECT tag, content FROM messages")
        old.execute("DELETE FROM meta WHERE key = 'fts_format'")
    old.close()

    ctx = make_ctx("old.db")
    assert [h.tag for h in ctx.search("数据库")] == [keep, failed]
    later = ctx.add("assistant", "数据库已经恢复，deploy again")
    hits = [h.tag for h in ctx.search("deploy")]
    assert sorted(hits) == [failed, later], "each message indexed once"
    assert {h.tag for h in ctx.search("数据库")} == {keep, failed, later}


def test_a_snippet_is_the_line_holding_the_whole_cjk_word(make_ctx: MakeContext) -> None:
    """ "数据库" is the pairs 数据 and 据库, which overlap: both count on the line holding it."""
    ctx = make_ctx()
    ctx.add("tool", "统计数据已经导出\n错误: 连接数据库超时", tool_name="sh")
    assert [h.snippet for h in ctx.search("数据库")] == ["错误: 连接[数据库]超时"]


def test_a_snippet_shows_the_match_inside_a_long_cjk_line(make_ctx: MakeContext) -> None:
    ctx = make_ctx()
    ctx.add("tool", "这是一段很长的中文日志" * 30 + "连接数据库超时" + "后面还有很多文字" * 20, tool_name="sh")
    (hit,) = ctx.search("数据库")
    assert hit.snippet.startswith("…" + ("这是一段很长的中文日志" * 3)[-28:] + "连接[数据库]超时后面"), hit.snippet
