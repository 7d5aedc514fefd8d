#include "server/checkpoint_export.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <memory>
#include <set>
#include <utility>

#include "common/env.h"
#include "common/text.h"

namespace ps {
namespace {

// numpy aligns the data of a .npy file to 64 bytes (its format doc).
constexpr size_t kNpyAlign = 64;
constexpr char kNpyMagic[] = "\x93NUMPY";

bool KeptInFileName(char c, bool first) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '-' || (c == '.' && !first);
}

// A .npy file being written: its header, then its data through a shared
// memory map of the whole file, whose blocks are reserved at creation. The
// one place of the export that makes POSIX file calls; each error becomes a
// Status naming the path (ErrnoStatus). Not thread-safe.
class MappedNpy {
 public:
  static StatusOr<std::unique_ptr<MappedNpy>> Create(const std::string& path,
                                                     const std::string& header,
                                                     uint64_t data_bytes) {
    std::unique_ptr<MappedNpy> f(new MappedNpy(path));
    f->fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (f->fd_ < 0) return ErrnoStatus(errno, "cannot create " + path);
    size_t written = 0;
    while (written < header.size()) {
      const ssize_t n = ::pwrite(f->fd_, header.data() + written, header.size() - written,
                                 static_cast<off_t>(written));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return ErrnoStatus(errno, "cannot write " + path);
      written += static_cast<size_t>(n);
    }
    f->size_ = header.size() + data_bytes;
    if (data_bytes == 0) return f;
    // Reserved blocks: a full disk fails here, not as a SIGBUS on a store
    // into the map.
    int err = ::posix_fallocate(f->fd_, 0, static_cast<off_t>(f->size_));
    if (err == EOPNOTSUPP || err == EINVAL) {
      // A file system without fallocate: the size alone (sparse).
      err = ::ftruncate(f->fd_, static_cast<off_t>(f->size_)) == 0 ? 0 : errno;
    }
    if (err != 0) {
      return ErrnoStatus(err, "cannot reserve " + std::to_string(f->size_) + " bytes for " + path);
    }
    // Populated at once: one pass of page allocation instead of a fault
    // per page as the rows arrive (the export runs about 2x faster).
    void* map =
        ::mmap(nullptr, f->size_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, f->fd_, 0);
    if (map == MAP_FAILED) return ErrnoStatus(errno, "cannot map " + path);
    f->map_ = static_cast<std::byte*>(map);
    f->data_ = std::span<std::byte>(f->map_ + header.size(), data_bytes);
    return f;
  }

  ~MappedNpy() {
    if (map_ != nullptr) ::munmap(map_, size_);
    if (fd_ >= 0) ::close(fd_);
  }

  std::span<std::byte> data() const { return data_; }
  uint64_t size() const { return size_; }

  // Writes the data back and syncs and closes the file.
  Status Finish() {
    if (map_ != nullptr) {
      if (::msync(map_, size_, MS_SYNC) != 0) return ErrnoStatus(errno, "cannot write " + path_);
      ::munmap(map_, size_);
      map_ = nullptr;
    }
    if (::fsync(fd_) != 0) return ErrnoStatus(errno, "cannot sync " + path_);
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) return ErrnoStatus(errno, "cannot close " + path_);
    return Status::Ok();
  }

 private:
  explicit MappedNpy(std::string path) : path_(std::move(path)) {}
  const std::string path_;
  int fd_ = -1;
  std::byte* map_ = nullptr;
  uint64_t size_ = 0;
  std::span<std::byte> data_;
};

// One .npy file per array, named as the header says.
class FileTarget final : public ArrayTarget {
 public:
  explicit FileTarget(std::string out) : out_(std::move(out)) {}

  StatusOr<TableArrays> Arrays(size_t, const ArrayTable& table) override {
    const std::string stem = ExportFileStem(table.name);
    const uint64_t shape[] = {table.rows, table.dim};
    const std::string header = NpyHeader("<f4", shape);
    const uint64_t bytes = table.rows * table.dim * sizeof(float);
    TableArrays arrays;
    PS_ASSIGN_OR_RETURN(arrays.values, Add(stem + ".values.npy", header, bytes));
    for (const std::string& slot : table.slot_names) {
      PS_ASSIGN_OR_RETURN(std::span<std::byte> s,
                          Add(stem + "." + ExportFileStem(slot) + ".npy", header, bytes));
      arrays.slots.push_back(s);
    }
    if (table.hashed) {
      const uint64_t ids_shape[] = {table.rows};
      PS_ASSIGN_OR_RETURN(arrays.ids, Add(stem + ".ids.npy", NpyHeader("<u8", ids_shape),
                                          table.rows * sizeof(uint64_t)));
    }
    return arrays;
  }

  // Every file written back, synced and closed.
  Status Finish() {
    for (auto& f : files_) {
      PS_RETURN_IF_ERROR(f->Finish());
      bytes_ += f->size();
    }
    return Status::Ok();
  }

  const std::vector<std::string>& names() const { return names_; }
  uint64_t bytes() const { return bytes_; }

 private:
  StatusOr<std::span<std::byte>> Add(const std::string& name, const std::string& header,
                                     uint64_t bytes) {
    if (!taken_.insert(name).second) {
      return InternalError(out_ + "/" + name + ": two arrays of the export have this file name");
    }
    PS_ASSIGN_OR_RETURN(std::unique_ptr<MappedNpy> f,
                        MappedNpy::Create(out_ + "/" + name, header, bytes));
    const std::span<std::byte> data = f->data();
    files_.push_back(std::move(f));
    names_.push_back(name);
    return data;
  }

  const std::string out_;
  std::vector<std::unique_ptr<MappedNpy>> files_;
  std::vector<std::string> names_;
  std::set<std::string> taken_;
  uint64_t bytes_ = 0;
};

std::string NumberList(const std::vector<uint64_t>& values) {
  std::string text = "[";
  for (size_t i = 0; i < values.size(); ++i) text += (i ? ", " : "") + std::to_string(values[i]);
  return text + "]";
}

std::string Manifest(const ArrayGeneration& g) {
  std::string m = "{\n";
  m += "  \"format\": " + JsonString(kExportFormatName) + ",\n";
  m += "  \"format_version\": " + std::to_string(kExportFormatVersion) + ",\n";
  m += "  \"checkpoint_dir\": " + JsonString(g.dir) + ",\n";
  m += "  \"clock\": " + std::to_string(g.clock) + ",\n";
  m += "  \"num_shards\": " + std::to_string(g.num_shards) + ",\n";
  m += "  \"fingerprint\": " + JsonString(g.fingerprint) + ",\n";
  m += "  \"tables\": [";
  for (size_t t = 0; t < g.tables.size(); ++t) {
    const ArrayTable& a = g.tables[t];
    const std::string stem = ExportFileStem(a.name);
    m += t ? ",\n    {\n" : "\n    {\n";
    m += "      \"name\": " + JsonString(a.name) + ",\n";
    m += "      \"kind\": \"" + std::string(a.hashed ? "hashed" : "range") + "\",\n";
    m += "      \"rows\": " + std::to_string(a.rows) + ",\n";
    m += "      \"dim\": " + std::to_string(a.dim) + ",\n";
    if (a.hashed) m += "      \"hash_slots\": " + std::to_string(a.hash_slots) + ",\n";
    const std::string_view type =
        std::string_view(a.optimizer).substr(0, std::string_view(a.optimizer).find_first_of(" \n"));
    m += "      \"optimizer\": " + JsonString(type) + ",\n";
    m += "      \"optimizer_settings\": " + JsonString(a.optimizer) + ",\n";
    m += "      \"slots\": [";
    for (size_t k = 0; k < a.slot_names.size(); ++k) {
      m += (k ? ", " : "") + JsonString(a.slot_names[k]);
    }
    m += "],\n";
    m += "      \"dtype\": \"float32\",\n";
    m += "      \"shape\": " + NumberList({a.rows, a.dim}) + ",\n";
    if (a.hashed) m += "      \"ids_dtype\": \"uint64\",\n";
    m += "      \"files\": {\n";
    m += "        \"values\": " + JsonString(stem + ".values.npy") + ",\n";
    if (a.hashed) m += "        \"ids\": " + JsonString(stem + ".ids.npy") + ",\n";
    m += "        \"state\": {";
    for (size_t k = 0; k < a.slot_names.size(); ++k) {
      m += (k ? ", " : "") + JsonString(a.slot_names[k]) + ": " +
           JsonString(stem + "." + ExportFileStem(a.slot_names[k]) + ".npy");
    }
    m += "}\n      },\n";
    m += "      \"rows_per_shard\": " + NumberList(a.shard_rows) + "\n";
    m += "    }";
  }
  m += g.tables.empty() ? "]\n}\n" : "\n  ]\n}\n";
  return m;
}

}  // namespace

std::string ExportFileStem(std::string_view name) {
  std::string stem;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    if (KeptInFileName(c, i == 0)) {
      stem += c;
    } else {
      char buf[4];
      std::snprintf(buf, sizeof buf, "%%%02X",
                    static_cast<unsigned>(static_cast<unsigned char>(c)));
      stem += buf;
    }
  }
  return stem;
}

std::string NpyHeader(std::string_view descr, std::span<const uint64_t> shape) {
  std::string dict = "{'descr': '" + std::string(descr) + "', 'fortran_order': False, 'shape': (";
  for (size_t i = 0; i < shape.size(); ++i) dict += (i ? ", " : "") + std::to_string(shape[i]);
  dict += shape.size() == 1 ? ",), }" : "), }";
  // magic (6) + version (2) + length (2) + dict + padding + '\n'.
  const size_t unpadded = 10 + dict.size() + 1;
  dict.append((kNpyAlign - unpadded % kNpyAlign) % kNpyAlign, ' ');
  dict += '\n';
  const uint16_t len = static_cast<uint16_t>(dict.size());
  std::string header(kNpyMagic, 6);
  header += '\x01';
  header += '\x00';
  header += static_cast<char>(len & 0xff);
  header += static_cast<char>(len >> 8);
  return header + dict;
}

StatusOr<ExportSummary> ExportCheckpoint(const std::string& checkpoint_dir, const std::string& out,
                                         const ExportOptions& options) {
  const auto say = [&](const std::string& line) {
    if (options.progress) options.progress(line);
  };
  PS_ASSIGN_OR_RETURN(std::unique_ptr<CheckpointArrays> arrays,
                      CheckpointArrays::Open(checkpoint_dir, options.clock));
  const ArrayGeneration& g = arrays->generation();

  OsFilesystem files;
  PS_ASSIGN_OR_RETURN(const Filesystem::Type type, files.TypeOf(out));
  if (type == Filesystem::Type::kMissing) {
    PS_RETURN_IF_ERROR(files.CreateDirs(out));
  } else if (type != Filesystem::Type::kDirectory) {
    return InvalidArgumentError(out + ": not a folder; give a new or empty folder to export into");
  } else {
    PS_ASSIGN_OR_RETURN(const std::vector<Filesystem::Entry> there, files.List(out));
    if (!there.empty() && !options.force) {
      return Status(StatusCode::kAlreadyExists,
                    out + ": holds " + std::to_string(there.size()) + " entries (" + there[0].name +
                        (there.size() > 1 ? ", ..." : "") +
                        "); give a new or empty folder, or --force to write over its files");
    }
    const std::string manifest = out + "/" + std::string(kExportManifestName);
    PS_ASSIGN_OR_RETURN(const Filesystem::Type old, files.TypeOf(manifest));
    if (old != Filesystem::Type::kMissing) PS_RETURN_IF_ERROR(files.RemoveFile(manifest));
  }
  say("exporting generation " + std::to_string(g.clock) + " of " + checkpoint_dir + " (" +
      std::to_string(g.num_shards) + " shards, " + std::to_string(g.tables.size()) +
      " tables) into " + out);

  FileTarget target(out);
  PS_RETURN_IF_ERROR(arrays->ReadInto(&target, options.progress));
  say("writing the arrays back to disk");
  PS_RETURN_IF_ERROR(target.Finish());

  const std::string manifest_path = out + "/" + std::string(kExportManifestName);
  const std::string tmp = manifest_path + ".tmp";
  const std::string manifest = Manifest(g);
  {
    PS_ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> f, files.NewWritableFile(tmp));
    PS_RETURN_IF_ERROR(f->Append(manifest));
    PS_RETURN_IF_ERROR(f->Sync());
    PS_RETURN_IF_ERROR(f->Close());
  }
  PS_RETURN_IF_ERROR(files.Rename(tmp, manifest_path));
  PS_RETURN_IF_ERROR(files.SyncDir(out));

  ExportSummary summary;
  summary.clock = g.clock;
  summary.num_shards = g.num_shards;
  summary.tables = g.tables.size();
  summary.files = target.names();
  summary.files.emplace_back(kExportManifestName);
  summary.bytes = target.bytes() + manifest.size();
  return summary;
}

}  // namespace ps
